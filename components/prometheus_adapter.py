"""prometheus-adapter (pinned Helm release): serves vLLM queue depth and DCGM GPU activity to
HPAs through the custom metrics API."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from .constants import PACKAGE, PROMETHEUS_ADAPTER_CHART, standard_labels
from .specs.metrics import adapter_values

NAMESPACE = "prometheus-adapter"


@dataclass(frozen=True)
class PrometheusAdapterArgs:
    prometheus_url: str
    depends_on: tuple[pulumi.Resource, ...] = ()


class PrometheusAdapter(pulumi.ComponentResource):
    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: PrometheusAdapterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:prometheus-adapter:PrometheusAdapter", name, None, opts)
        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={"name": NAMESPACE, "labels": {**standard_labels(NAMESPACE, "metrics"), "pod-security.kubernetes.io/enforce": "restricted"}},
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            name="prometheus-adapter",
            namespace=NAMESPACE,
            chart=PROMETHEUS_ADAPTER_CHART.chart,
            version=PROMETHEUS_ADAPTER_CHART.version,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=PROMETHEUS_ADAPTER_CHART.repo),
            values=adapter_values(args.prometheus_url),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[namespace, *args.depends_on]),
        )
        self.register_outputs({"prometheusUrl": args.prometheus_url})
