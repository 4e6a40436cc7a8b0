"""What the pods of every workload the platform runs share, whichever builds them (pure builders):
the restricted container security context, the mesh sidecar's drain and size annotations, and
the relabelings that scrape the sidecar's merged metrics. Below the server pod's module
(`pod.py`) and the endpoint picker's (`endpoint_picker/`), which both use them, and importing
neither: the picker's objects need nothing of a server's plan."""

from __future__ import annotations

import json
from typing import Any

from platform_config.serving import MESH_PROXY_RESOURCES

# The model servers' user (the vLLM image's `vllm` user), and the default of every container here.
RUN_AS = 1000


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
