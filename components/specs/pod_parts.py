"""What the pods of every workload the platform runs share, whichever builds them (pure builders):
the restricted security contexts, the GPU pools' toleration and the environment of a container that
asks for no GPU, the Hugging Face token's Secret, a restricted platform namespace, the aws CLI
container that copies from S3, spreading pods over nodes, and the mesh sidecar's drain and size
annotations, outbound exclusions and merged-metrics relabelings. Below the modules of the server
pod (`pod.py`), the batch jobs, the weight mirror, the image pre-pull and the endpoint picker
(`endpoint_picker/`), which use them, and importing none of them: none of these needs a plan."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from platform_config.serving import MESH_PROXY_RESOURCES

from ..constants import GPU_TAINT_EFFECT, GPU_TAINT_KEY, standard_labels

# The model servers' user (the vLLM image's `vllm` user), and the default of every container here.
RUN_AS = 1000
# The writable HOME of the pods' containers (the vLLM image's user's).
HOME_DIR = "/home/vllm"
# The Secret holding a tenant's Hugging Face token, in its namespace, and its key.
HF_TOKEN_SECRET = "huggingface-token"
HF_TOKEN_KEY = "token"


def container_security_context(user: int = RUN_AS) -> dict[str, Any]:
    """What pod security `restricted` asks of a container, with a read-only root filesystem: the
    model servers', the batch jobs' and the image pre-pull pods' containers alike."""
    return {
        "runAsNonRoot": True,
        "runAsUser": user,
        "runAsGroup": user,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def draining_sidecar_annotations(grace_seconds: int) -> dict[str, str]:
    """The mesh sidecar of a pod that drains: it starts before the application, outlives its
    drain (`terminationDrainDuration`) and exits once the last connection closes
    (EXIT_ON_ZERO_ACTIVE_CONNECTIONS) rather than at the end of the grace period; and its size,
    stated so quotas count it exactly (MESH_PROXY_RESOURCES)."""
    return {
        "proxy.istio.io/config": json.dumps(
            {
                "terminationDrainDuration": f"{grace_seconds}s",
                "holdApplicationUntilProxyStarts": True,
                "proxyMetadata": {"EXIT_ON_ZERO_ACTIVE_CONNECTIONS": "true"},
            }
        ),
        **mesh_sidecar_size_annotations(),
    }


def mesh_sidecar_size_annotations() -> dict[str, str]:
    """The mesh sidecar's size, stated so quotas count it exactly (MESH_PROXY_RESOURCES; istio 1.30.3
    files/injection-template.yaml reads these annotations)."""
    return {
        "sidecar.istio.io/proxyCPU": MESH_PROXY_RESOURCES["cpu"],
        "sidecar.istio.io/proxyMemory": MESH_PROXY_RESOURCES["memory"],
        "sidecar.istio.io/proxyMemoryLimit": MESH_PROXY_RESOURCES["memory"],
    }


def merged_metrics_relabelings() -> list[dict[str, Any]]:
    """Scrape the Istio sidecar's merged metrics (app metrics included) at the port Istio
    writes into the pod's prometheus.io/port annotation."""
    return [
        {
            "sourceLabels": ["__address__", "__meta_kubernetes_pod_annotation_prometheus_io_port"],
            "action": "replace",
            "regex": "([^:]+)(?::\\d+)?;(\\d+)",
            "replacement": "$1:$2",
            "targetLabel": "__address__",
        },
        {"sourceLabels": ["__meta_kubernetes_pod_label_inference_platform_model_version"], "targetLabel": "model_version"},
    ]


# --- security, scheduling and credentials -----------------------------------------------


# For a container on a GPU node that asks for no GPU: the CUDA base images set NVIDIA_VISIBLE_DEVICES=all, and where
# the node's default container runtime is NVIDIA's (the EKS NVIDIA AMIs') the toolkit would give such a container
# every GPU of the node; `void` gives it none (NVIDIA Container Toolkit, "Specialized configurations": void).
NO_GPU_ENV = ({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},)


def token_secret(name: str, namespace: str, token: Any, **labels: str) -> dict[str, Any]:
    """A Hugging Face token as a Secret (`token`: the stack's secret), read by pods through `env.valueFrom`."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": standard_labels(name, "credentials", **labels)},
        "type": "Opaque",
        "stringData": {HF_TOKEN_KEY: token},
    }


def gpu_toleration() -> dict[str, str]:
    """Tolerates the GPU pools' taint (components/specs/gpu_sharing.py node_taint), whatever its value."""
    return {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": GPU_TAINT_EFFECT}


def pod_security_context(user: int = RUN_AS, *, volumes_writable: bool = True) -> dict[str, Any]:
    """The pod-level half of pod security `restricted`, as `user`; with `volumes_writable`, volumes writable by the
    containers' group."""
    return {
        "runAsNonRoot": True,
        "runAsUser": user,
        "runAsGroup": user,
        **({"fsGroup": user} if volumes_writable else {}),
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restricted_namespace(name: str, component: str) -> dict[str, Any]:
    """A platform namespace whose pods must meet pod security `restricted` (enforced, audited and warned), like
    every pod the builders here make: the image pre-pull's and the weight mirror's."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {
                **standard_labels(name, component),
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/audit": "restricted",
                "pod-security.kubernetes.io/warn": "restricted",
            },
        },
    }


def node_spread(selector: Mapping[str, str], *, required: bool = False) -> list[dict[str, Any]]:
    """Pods matching `selector` spread over nodes, one more on a node than on any other at most: as the scheduler can
    (`ScheduleAnyway`), or `required` (`DoNotSchedule`: a replica waits for a node of its own rather than share one,
    for what every request depends on)."""
    return [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule" if required else "ScheduleAnyway",
            "labelSelector": {"matchLabels": dict(selector)},
        }
    ]


# --- copying from S3 ------------------------------------------------------------------


def aws_cli_env() -> list[dict[str, str]]:
    """The aws CLI's environment in a pod: a writable HOME, and no instance metadata. Pods cannot
    reach the instance metadata service (hop limit 1, NetworkPolicy): the credentials and region
    come from the workload identity's injected variables, so the CLI must not spend its start
    probing IMDS (botocore's AWS_EC2_METADATA_DISABLED)."""
    return [{"name": "HOME", "value": HOME_DIR}, {"name": "AWS_EC2_METADATA_DISABLED", "value": "true"}]


# What copying weights or adapter modules in a pod's init container may use.
FETCH_RESOURCES = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "2Gi"}}


def aws_cli_container(
    name: str,
    image: str,
    command: list[str],
    volume_mounts: list[dict[str, Any]],
    resources: dict[str, Any] = FETCH_RESOURCES,
) -> dict[str, Any]:
    """A container of the pinned aws CLI image (`image`: the plan's, with its digest where locked) running `command`
    with the pods' aws environment: every S3 copy of the servers' and batch jobs' pods (weights, adapter modules, a
    job's stage-in and uploader)."""
    return {
        "name": name,
        "image": image,
        "command": command,
        "env": aws_cli_env(),
        "resources": resources,
        "volumeMounts": volume_mounts,
        "securityContext": container_security_context(),
    }


# The addresses a pod's outbound traffic goes to around its sidecar (istio 1.30.3 files/injection-template.yaml).
EXCLUDE_OUTBOUND_ANNOTATION = "traffic.sidecar.istio.io/excludeOutboundIPRanges"
