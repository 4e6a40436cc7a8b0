"""The values of the platform's system charts that other builders read too (pure): metrics-server's, and the labels
of the cluster autoscaler's pods."""

from __future__ import annotations

from typing import Any


def metrics_server_values(node_selector: dict[str, str] | None) -> dict[str, Any]:
    """Two replicas and a budget, so a node drain never takes the metrics API away (keys read
    at kubernetes-sigs/metrics-server tag metrics-server-helm-chart-3.13.1:
    templates/deployment.yaml `.Values.replicas`, `.Values.nodeSelector`; templates/pdb.yaml)."""
    values: dict[str, Any] = {"replicas": 2, "podDisruptionBudget": {"enabled": True, "maxUnavailable": 1}}
    if node_selector:
        values["nodeSelector"] = node_selector
    return values


# The chart's pod labels for the AWS provider (charts/cluster-autoscaler/templates/_helpers.tpl
# `cluster-autoscaler.instance-name` and `.name`, the same from cluster-autoscaler-chart-9.37.0 to
# 9.53.0: the release's name, and `<cloudProvider>-cluster-autoscaler`).
AUTOSCALER_POD_SELECTOR = {"app.kubernetes.io/instance": "cluster-autoscaler", "app.kubernetes.io/name": "aws-cluster-autoscaler"}
