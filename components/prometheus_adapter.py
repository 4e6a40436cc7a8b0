"""prometheus-adapter (pinned Helm release): serves vLLM queue depth and DCGM GPU activity to
HPAs through the custom metrics API."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from platform_config.pins import PROMETHEUS_ADAPTER

from .constants import PACKAGE
from .k8s_objects import helm_release, system_namespace
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
        namespace = system_namespace(
            f"{name}-namespace",
            NAMESPACE,
            "metrics",
            pulumi.ResourceOptions(parent=self),
            **{"pod-security.kubernetes.io/enforce": "restricted"},
        )
        self.release = helm_release(
            f"{name}-release",
            "prometheus-adapter",
            NAMESPACE,
            PROMETHEUS_ADAPTER,
            adapter_values(args.prometheus_url),
            pulumi.ResourceOptions(parent=self, depends_on=[namespace, *args.depends_on]),
        )
        self.register_outputs({"prometheusUrl": args.prometheus_url})
