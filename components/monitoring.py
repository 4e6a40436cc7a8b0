"""Prometheus (kube-prometheus-stack, pinned) selecting ServiceMonitors from every namespace,
so vLLM and DCGM metrics are scraped and HPA metrics can be served from them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pulumi

from platform_config.chart_images import ChartImageValues
from platform_config.pins import KUBE_PROMETHEUS_STACK

from .constants import MONITORING_NAMESPACE, PACKAGE, PRIVILEGED, PROMETHEUS_URL
from .k8s_objects import HelmRelease, KubernetesObject, helm_release, system_namespace
from .specs.dashboards import ALLOWED_NODE_LABELS
from .specs.slo_rules import ALLOWED_POD_LABELS


class Monitoring(pulumi.ComponentResource):
    # Declared for the type checker only: pulumi evaluates a resource class's annotations at each registration
    # (pulumi 3.272.0 _types.resource_types, uncached), importing what they name.
    if TYPE_CHECKING:
        release: HelmRelease
        namespace: KubernetesObject

    def __init__(self, name: str, chart_image_values: ChartImageValues, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:monitoring:Monitoring", name, None, opts)
        # node-exporter needs host namespaces.
        self.namespace = namespace = system_namespace(
            f"{name}-namespace", MONITORING_NAMESPACE, "monitoring", pulumi.ResourceOptions(parent=self), **PRIVILEGED
        )
        select_all = False
        self.release = helm_release(
            f"{name}-release",
            "kube-prometheus-stack",
            MONITORING_NAMESPACE,
            KUBE_PROMETHEUS_STACK,
            {
                "prometheus": {
                    "prometheusSpec": {
                        # Pick up ServiceMonitors/PodMonitors of every namespace, with no release label.
                        "serviceMonitorSelectorNilUsesHelmValues": select_all,
                        "podMonitorSelectorNilUsesHelmValues": select_all,
                        "ruleSelectorNilUsesHelmValues": select_all,
                        "retention": "15d",
                    }
                },
                "grafana": {
                    # Dashboards of every namespace: a model's lives in its tenant's namespace
                    # (components/specs/dashboards.py). ALL is the chart's default since 45.12.0;
                    # said here so the dashboards do not hang on a default.
                    "sidecar": {"dashboards": {"searchNamespace": "ALL"}},
                },
                "kube-state-metrics": {
                    # kube_node_labels and kube_pod_labels carry no label unless allowed: the
                    # overview groups GPUs by pool and instance type, the GPU rule pods by version.
                    "metricLabelsAllowlist": [
                        f"nodes=[{','.join(ALLOWED_NODE_LABELS)}]",
                        f"pods=[{','.join(ALLOWED_POD_LABELS)}]",
                    ],
                },
            },
            pulumi.ResourceOptions(parent=self, depends_on=[namespace]),
            chart_image_values=chart_image_values,
        )
        self.register_outputs({"prometheusUrl": PROMETHEUS_URL})
