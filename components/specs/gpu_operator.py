"""Helm values for the NVIDIA GPU Operator, typed by the pools it has to serve (pure)."""

from __future__ import annotations

from typing import Any

from ..constants import GPU_OPERATOR_NAMESPACE, standard_labels
from .gpu_sharing import MIG_DISABLED_CONFIG, MIG_STRATEGY, PLAIN_DEVICE_PLUGIN_CONFIG
from .pod_parts import gpu_toleration

MIG_PARTED_CONFIGMAP = "mig-parted-config"
DEVICE_PLUGIN_CONFIGMAP = "device-plugin-config"
DCGM_EXPORTER_APP_LABEL = "nvidia-dcgm-exporter"


def config_map(name: str, data: dict[str, str]) -> dict[str, Any]:
    """A ConfigMap the operator reads, in its namespace."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": GPU_OPERATOR_NAMESPACE, "labels": standard_labels(name, "gpu-operator")},
        "data": data,
    }


def gpu_operator_values() -> dict[str, Any]:
    """The EKS NVIDIA AMIs (AL2023_x86_64_NVIDIA) ship the driver and the container toolkit, so
    the operator installs neither; it runs the device plugin, MIG manager, GFD and DCGM."""
    tolerations = [gpu_toleration()]
    return {
        "driver": {"enabled": False},
        "toolkit": {"enabled": False},
        "nfd": {"enabled": True},
        "mig": {"strategy": MIG_STRATEGY},
        "migManager": {
            "enabled": True,
            "config": {"name": MIG_PARTED_CONFIGMAP, "default": MIG_DISABLED_CONFIG},
        },
        "devicePlugin": {
            "enabled": True,
            "config": {"name": DEVICE_PLUGIN_CONFIGMAP, "default": PLAIN_DEVICE_PLUGIN_CONFIG},
        },
        "dcgmExporter": {
            "enabled": True,
            # The platform declares its own ServiceMonitor (validated at preview); not the chart's.
            "serviceMonitor": {"enabled": False},
        },
        "daemonsets": {"tolerations": tolerations},
    }


def dcgm_service_monitor(namespace: str) -> dict[str, Any]:
    """Scrape DCGM exporter; honorLabels keeps its pod/namespace/container labels (the pod that
    holds the GPU) instead of renaming them exported_*."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "dcgm-exporter", "namespace": namespace, "labels": {"app": DCGM_EXPORTER_APP_LABEL}},
        "spec": {
            "selector": {"matchLabels": {"app": DCGM_EXPORTER_APP_LABEL}},
            "namespaceSelector": {"matchNames": [namespace]},
            "endpoints": [{"port": "gpu-metrics", "path": "/metrics", "interval": "15s", "honorLabels": True}],
        },
    }
