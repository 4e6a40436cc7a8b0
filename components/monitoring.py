"""Prometheus (kube-prometheus-stack, pinned) selecting ServiceMonitors from every namespace,
so vLLM and DCGM metrics are scraped and HPA metrics can be served from them."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from .constants import MONITORING_NAMESPACE, PACKAGE, PROMETHEUS_STACK_CHART, standard_labels

# The Prometheus Operator's governing Service for every Prometheus it runs: a stable name.
PROMETHEUS_URL = f"http://prometheus-operated.{MONITORING_NAMESPACE}.svc"


class Monitoring(pulumi.ComponentResource):
    release: k8s.helm.v3.Release

    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:monitoring:Monitoring", name, None, opts)
        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={
                "name": MONITORING_NAMESPACE,
                # node-exporter needs host namespaces.
                "labels": {**standard_labels(MONITORING_NAMESPACE, "monitoring"), "pod-security.kubernetes.io/enforce": "privileged"},
            },
            opts=pulumi.ResourceOptions(parent=self),
        )
        select_all = False
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            name="kube-prometheus-stack",
            namespace=MONITORING_NAMESPACE,
            chart=PROMETHEUS_STACK_CHART.chart,
            version=PROMETHEUS_STACK_CHART.version,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=PROMETHEUS_STACK_CHART.repo),
            values={
                "prometheus": {
                    "prometheusSpec": {
                        # Pick up ServiceMonitors/PodMonitors of every namespace, with no release label.
                        "serviceMonitorSelectorNilUsesHelmValues": select_all,
                        "podMonitorSelectorNilUsesHelmValues": select_all,
                        "ruleSelectorNilUsesHelmValues": select_all,
                        "retention": "15d",
                    }
                },
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[namespace]),
        )
        self.register_outputs({"prometheusUrl": PROMETHEUS_URL})
