"""metrics-server (pinned Helm release): the resource metrics API that CPU- and memory-based
HPAs read, such as the Istio ingress gateway's and Knative's own; without it they never act."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pulumi

from platform_config.chart_images import ChartImageValues
from platform_config.pins import METRICS_SERVER

from .constants import KUBE_SYSTEM_NAMESPACE, PACKAGE
from .k8s_objects import HelmRelease, helm_release
from .specs.system_charts import metrics_server_values


@dataclass(frozen=True)
class MetricsServerArgs:
    # Where it runs: the system node group on EKS; anywhere on an existing cluster.
    node_selector: dict[str, str] | None = None
    # The values that pin the charts' images to the image lock's digests (`Plan.chart_image_values`).
    chart_image_values: ChartImageValues = field(default_factory=dict)


class MetricsServer(pulumi.ComponentResource):
    # Declared for the type checker only: pulumi evaluates a resource class's annotations at each registration
    # (pulumi 3.272.0 _types.resource_types, uncached), importing what they name.
    if TYPE_CHECKING:
        release: HelmRelease

    def __init__(self, name: str, args: MetricsServerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:metrics-server:MetricsServer", name, None, opts)
        self.release = helm_release(
            f"{name}-release",
            "metrics-server",
            KUBE_SYSTEM_NAMESPACE,
            METRICS_SERVER,
            metrics_server_values(args.node_selector),
            pulumi.ResourceOptions(parent=self),
            chart_image_values=args.chart_image_values,
        )
        self.register_outputs({"version": METRICS_SERVER.version})
