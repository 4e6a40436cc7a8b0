"""prometheus-adapter (pinned Helm release): serves vLLM queue depth and DCGM GPU activity to
HPAs through the custom metrics API, and, with the Inference Extension CRDs given, the endpoint
pickers' flow-control queues as metrics of their InferencePools."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pulumi

from platform_config.chart_images import ChartImageValues
from platform_config.namespaces import PROMETHEUS_ADAPTER_NAMESPACE as NAMESPACE
from platform_config.pins import PROMETHEUS_ADAPTER

from .constants import PACKAGE
from .k8s_objects import HelmRelease, helm_release, system_namespace
from .specs.metrics import adapter_values


@dataclass(frozen=True)
class PrometheusAdapterArgs:
    prometheus_url: str
    depends_on: tuple[pulumi.Resource, ...] = ()
    # The InferencePool CRD's installation (InferenceExtensionCrds). Given, the adapter also
    # serves the EPP queue metric and is installed after the CRD: it resolves the
    # inferencepools resource when it starts, and exits if the resource is unknown.
    inference_extension_crds: pulumi.Resource | None = None
    # The values that pin the charts' images to the image lock's digests (`Plan.chart_image_values`).
    chart_image_values: ChartImageValues = field(default_factory=dict)


class PrometheusAdapter(pulumi.ComponentResource):
    # Declared for the type checker only: pulumi evaluates a resource class's annotations at each registration
    # (pulumi 3.272.0 _types.resource_types, uncached), importing what they name.
    if TYPE_CHECKING:
        release: HelmRelease

    def __init__(self, name: str, args: PrometheusAdapterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:prometheus-adapter:PrometheusAdapter", name, None, opts)
        crds = args.inference_extension_crds
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
            adapter_values(args.prometheus_url, epp_queue=crds is not None),
            pulumi.ResourceOptions(parent=self, depends_on=[namespace, *args.depends_on, *([crds] if crds else [])]),
            chart_image_values=args.chart_image_values,
        )
        self.register_outputs({"prometheusUrl": args.prometheus_url})
