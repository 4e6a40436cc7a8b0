"""Prometheus (kube-prometheus-stack, pinned) selecting ServiceMonitors from every namespace,
so vLLM and DCGM metrics are scraped and HPA metrics can be served from them."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from platform_config.pins import KUBE_PROMETHEUS_STACK

from .constants import MONITORING_NAMESPACE, PACKAGE, PRIVILEGED
from .k8s_objects import helm_release, system_namespace

# The Prometheus Operator's governing Service for every Prometheus it runs: a stable name.
PROMETHEUS_URL = f"http://prometheus-operated.{MONITORING_NAMESPACE}.svc"


class Monitoring(pulumi.ComponentResource):
    release: k8s.helm.v3.Release

    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:monitoring:Monitoring", name, None, opts)
        # node-exporter needs host namespaces.
        namespace = system_namespace(
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
            },
            pulumi.ResourceOptions(parent=self, depends_on=[namespace]),
        )
        self.register_outputs({"prometheusUrl": PROMETHEUS_URL})
