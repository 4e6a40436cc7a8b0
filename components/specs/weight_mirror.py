"""The weight mirror's Kubernetes objects and IAM policies (pure): the `model-weights` namespace at pod security
`restricted` with the tenants' egress rules, per tenant a service account whose role writes only the tenant's part of
the bucket and a copy of the tenant's Hugging Face token, and one Job per mirrored revision
(platform_config/weight_mirror.py) that runs components/mirror_runner/mirror_runner.py in the vLLM image on a
node of a pool that reads it.

Servers and batch jobs wait for their revisions' Jobs (components/weight_mirror.py): pulumi-kubernetes holds a Job's
creation until it completes, and a new revision is a new Job, so a revision reaches its readers only once its folder is
whole.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from platform_config.models import WeightMirrorConfig
from platform_config.namespaces import MIRROR_NAMESPACE
from platform_config.weight_mirror import MirroredRevision, tenant_prefix

from ..constants import LABEL_POOL, LABEL_TENANT, standard_labels
from ..mirror_runner.mirror_runner import PERMANENT_FAILURE_EXIT_CODE
from .network import network_policy, outbound_policies
from .pod_parts import (
    HF_TOKEN_KEY,
    HOME_DIR,
    NO_GPU_ENV,
    aws_cli_env,
    container_security_context,
    gpu_toleration,
    pod_security_context,
    restricted_namespace,
    token_secret,
)
from .s3_access import s3_policy
from .tenancy import DEFAULT_DENY_EGRESS_POLICY, DEFAULT_DENY_POLICY

RUNNER_SOURCE = Path(__file__).resolve().parent.parent / "mirror_runner" / "mirror_runner.py"
RUNNER_KEY = "mirror_runner.py"
RUNNER_DIR = "/opt/mirror-runner"
RUNNER_CONFIG_MAP = "mirror-runner"
COMPONENT = "weight-mirror"
# One file in flight: at most 4 parts of 64 MiB queued or uploading (the runner's max_in_memory_upload_chunks) and one
# being read, about 320 MiB (576 MiB at s3transfer's worst, one part per reading thread), the download's buffers and
# Python's own.
MIRROR_RESOURCES = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}
# A failed copy (a dropped download, a throttled upload) is tried again from the start of the revision.
MIRROR_BACKOFF_LIMIT = 3
ANNOTATION_MIRROR_SOURCE = "inference.platform/mirrors"
ANNOTATION_MIRROR_COPY = "inference.platform/mirror-copy"
ANNOTATION_RUNNER_DIGEST = "inference.platform/mirror-runner-sha256"
COPY_CONTAINER = "copy"


def mirror_namespace() -> dict[str, Any]:
    return restricted_namespace(MIRROR_NAMESPACE, COMPONENT)


def mirror_network_policies() -> list[dict[str, Any]]:
    """Nothing in; out only DNS, the Pod Identity Agent and HTTPS (Hugging Face, S3), as for the tenants' pods; the
    namespace runs no mesh sidecars."""
    return [
        network_policy(MIRROR_NAMESPACE, DEFAULT_DENY_POLICY, "Ingress", None),
        network_policy(MIRROR_NAMESPACE, DEFAULT_DENY_EGRESS_POLICY, "Egress", None),
        *outbound_policies(MIRROR_NAMESPACE, mesh=False),
    ]


# The mirror's service account for a tenant is this prefix and the tenant's name (the pack reads it to tell whose a
# mirror role is).
MIRROR_SERVICE_ACCOUNT_PREFIX = "mirror-"


def mirror_service_account_name(tenant: str) -> str:
    return f"{MIRROR_SERVICE_ACCOUNT_PREFIX}{tenant}"


def mirror_token_secret_name(tenant: str) -> str:
    return f"huggingface-token-{tenant}"


def mirror_write_policy(mirror: WeightMirrorConfig, tenant: str) -> str:
    """The tenant's mirror role, under the tenant's prefix only: list (the marker's lookup, the folder's keys), read
    (the marker), write (a multipart upload needs PutObject, and AbortMultipartUpload when it fails) and delete (a copy
    that does not match Hugging Face's listing, a key an earlier selection left)."""
    actions = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
    return s3_policy([(tenant_prefix(mirror, tenant), actions)])


def mirror_token_secret(tenant: str, token: Any) -> dict[str, Any]:
    """A copy of the tenant's Hugging Face token (`token`: the stack's secret) for its mirror Jobs."""
    return token_secret(mirror_token_secret_name(tenant), MIRROR_NAMESPACE, token, **{LABEL_TENANT: tenant})


def mirror_service_account(tenant: str, annotations: Any) -> dict[str, Any]:
    """`annotations`: what the workload identity needs on it (IRSA's role ARN; none for Pod Identity)."""
    name = mirror_service_account_name(tenant)
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": name,
            "namespace": MIRROR_NAMESPACE,
            "labels": standard_labels(name, COMPONENT, **{LABEL_TENANT: tenant}),
            "annotations": annotations,
        },
        "automountServiceAccountToken": False,
    }


def runner_config_map() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": RUNNER_CONFIG_MAP,
            "namespace": MIRROR_NAMESPACE,
            "labels": standard_labels(RUNNER_CONFIG_MAP, COMPONENT),
        },
        "data": {RUNNER_KEY: RUNNER_SOURCE.read_text(encoding="utf-8")},
    }


def runner_digest() -> str:
    """The runner's content, on the Job's pod template: a new runner replaces the Jobs (a Job's template cannot change
    in place), which the marker makes cheap where the copy is complete."""
    return hashlib.sha256(RUNNER_SOURCE.read_bytes()).hexdigest()[:16]


def mirror_job(revision: MirroredRevision, *, token: bool) -> dict[str, Any]:
    """The Job that copies `revision` to its folder in the mirror, on a node of its pool (no GPU: the node has the
    image pre-pulled, and room for it), with the tenant's mirror role and, for gated repositories, the tenant's own
    Hugging Face token (`token`)."""
    labels = standard_labels(revision.job_name, COMPONENT, **{LABEL_TENANT: revision.tenant, LABEL_POOL: revision.pool})
    annotations = {ANNOTATION_MIRROR_SOURCE: f"{revision.repo}@{revision.revision}", ANNOTATION_MIRROR_COPY: revision.folder}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": revision.job_name,
            "namespace": MIRROR_NAMESPACE,
            "labels": labels,
            # A Job that failed (an outage, its retries spent) is replaced by the next `pulumi up` rather than awaited
            # again: pulumi-kubernetes replaces a resource left unready when it carries this annotation.
            "annotations": {**annotations, "pulumi.com/replaceUnready": "true"},
        },
        "spec": {
            "backoffLimit": MIRROR_BACKOFF_LIMIT,
            "activeDeadlineSeconds": revision.deadline_seconds,
            "podFailurePolicy": {
                "rules": [
                    # An evicted pod (preempted by a server, its node drained or taken back) is not the copy's fault.
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                    # What no retry mends fails the Job at once.
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": COPY_CONTAINER,
                            "operator": "In",
                            "values": [PERMANENT_FAILURE_EXIT_CODE],
                        },
                    },
                ]
            },
            "template": {
                "metadata": {"labels": labels, "annotations": {**annotations, ANNOTATION_RUNNER_DIGEST: runner_digest()}},
                "spec": {
                    "restartPolicy": "Never",
                    "serviceAccountName": mirror_service_account_name(revision.tenant),
                    "automountServiceAccountToken": False,
                    "nodeSelector": {LABEL_POOL: revision.pool},
                    "tolerations": [gpu_toleration()],
                    "securityContext": pod_security_context(),
                    "containers": [copy_container(revision, token=token)],
                    "volumes": [
                        {"name": "runner", "configMap": {"name": RUNNER_CONFIG_MAP}},
                        {"name": "home", "emptyDir": {"sizeLimit": "1Gi"}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
                    ],
                },
            },
        },
    }


def copy_container(revision: MirroredRevision, *, token: bool) -> dict[str, Any]:
    """The mirror runner in the vLLM image, told what to copy where by its environment: the aws CLI's, the revision's,
    no GPU and, with `token`, the tenant's Hugging Face token."""
    env: list[dict[str, Any]] = [
        *aws_cli_env(),
        {"name": "MIRROR_REPO", "value": revision.repo},
        {"name": "MIRROR_REVISION", "value": revision.revision},
        {"name": "MIRROR_DESTINATION", "value": revision.folder},
        {"name": "MIRROR_MARKER", "value": revision.marker},
        {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        *NO_GPU_ENV,
    ]
    if token:
        secret = {"name": mirror_token_secret_name(revision.tenant), "key": HF_TOKEN_KEY}
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": secret}})
    return {
        "name": COPY_CONTAINER,
        "image": revision.image,
        "command": ["python3", f"{RUNNER_DIR}/{RUNNER_KEY}"],
        "env": env,
        "resources": MIRROR_RESOURCES,
        "volumeMounts": [
            {"name": "runner", "mountPath": RUNNER_DIR, "readOnly": True},
            {"name": "home", "mountPath": HOME_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": container_security_context(),
    }
