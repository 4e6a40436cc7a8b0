"""Pulling the model servers' images onto every GPU node before a replica needs them (pure): one
DaemonSet per pool, in a namespace of its own at pod security `restricted`, whose only container
runs the image with a no-op command.

A replica that lands on a node which has been up finds the image there, so its cold start is the
weights and the engine only. The container keeps running (`sleep infinity`, not an exit) so the
image stays in use: the kubelet's image garbage collection removes only images no container uses.
A lazy-loading snapshotter (SOCI) is not used: it needs a SOCI index pushed beside the image,
which the vllm/vllm-openai images on Docker Hub do not have, and the EKS AL2023 NVIDIA AMI does not
run it by default.
"""

from __future__ import annotations

from typing import Any

from platform_config.namespaces import PREPULL_NAMESPACE

from ..constants import LABEL_POOL, standard_labels
from .pod_parts import NO_GPU_ENV, container_security_context, gpu_toleration, pod_security_context, restricted_namespace

# Nobody: the image's own user is root, which `restricted` refuses.
PREPULL_USER = 65534
# `sleep` from the image's coreutils: no CPU after start, well under a MiB of memory.
PREPULL_RESOURCES = {"requests": {"cpu": "1m", "memory": "16Mi"}, "limits": {"cpu": "10m", "memory": "16Mi"}}


def prepull_namespace() -> dict[str, Any]:
    return restricted_namespace(PREPULL_NAMESPACE, "image-prepull")


def prepull_name(pool: str) -> str:
    return f"prepull-{pool}"


def _container(index: int, image: str) -> dict[str, Any]:
    return {
        "name": f"image-{index}",
        "image": image,
        "command": ["sleep", "infinity"],
        # It runs on GPU nodes and needs none of their GPUs.
        "env": list(NO_GPU_ENV),
        "resources": PREPULL_RESOURCES,
        "securityContext": container_security_context(PREPULL_USER),
    }


def prepull_daemonset(pool: str, images: tuple[str, ...]) -> dict[str, Any]:
    """One pod on every node of `pool`, one container per image its model servers run."""
    name = prepull_name(pool)
    labels = standard_labels(name, "image-prepull")
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": PREPULL_NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            # A new image version is pulled on every node at once: nothing serves from these pods.
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
            "template": {
                # No sidecar: it serves nothing. A DaemonSet's pod never keeps the cluster
                # autoscaler from removing its node.
                "metadata": {"labels": {**labels, "sidecar.istio.io/inject": "false"}},
                "spec": {
                    "nodeSelector": {LABEL_POOL: pool},
                    "tolerations": [gpu_toleration()],
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 1,
                    "securityContext": pod_security_context(PREPULL_USER, volumes_writable=False),
                    "containers": [_container(i, image) for i, image in enumerate(images)],
                },
            },
        },
    }
