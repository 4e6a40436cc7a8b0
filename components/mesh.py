"""The Istio service mesh (pinned Helm releases: base, CNI node agent, istiod, ingress gateway).

The CNI node agent sets up traffic redirection, so injected pods need no NET_ADMIN init
container and tenant namespaces can enforce the `restricted` Pod Security Standard. Metrics
merging lets Prometheus scrape application metrics through the sidecar while mTLS is STRICT.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pulumi

from platform_config.chart_images import ChartImageValues
from platform_config.models import LoadBalancerScheme
from platform_config.pins import ISTIO_BASE, ISTIO_CNI, ISTIO_GATEWAY, ISTIOD, ChartPin

from .constants import (
    GATEWAY_SERVICE_ACCOUNT,
    ISTIO_SYSTEM_NAMESPACE,
    PACKAGE,
    PRIVILEGED,
)
from .k8s_objects import HelmRelease, KubernetesObject, helm_release, system_namespace
from .specs.mesh import gateway_disruption_budget, gateway_overload_config_map, gateway_values, istiod_values


@dataclass(frozen=True)
class MeshArgs:
    # On EKS: the AWS Load Balancer Controller, which provisions the gateway's NLB (its
    # webhook must be up before the gateway's Service is created).
    load_balancer: pulumi.Resource | None
    nlb_idle_timeout_seconds: int
    # Reachable inside the VPC only unless the stack opts in (`traffic.loadBalancerScheme`).
    load_balancer_scheme: LoadBalancerScheme = "internal"
    # The fewest istiod replicas (production: FLOORS.control_plane_replicas_in_production).
    control_plane_replicas: int = 1
    # Production: istiod and the gateway one pod per node, behind disruption budgets.
    spread_control_plane: bool = False
    # The values that pin the charts' images to the image lock's digests (`Plan.chart_image_values`).
    chart_image_values: ChartImageValues = field(default_factory=dict)


class Mesh(pulumi.ComponentResource):
    # Declared for the type checker only: pulumi evaluates a resource class's annotations at each registration
    # (pulumi 3.272.0 _types.resource_types, uncached), importing what they name.
    if TYPE_CHECKING:
        base: HelmRelease
        istiod: HelmRelease
        gateway: HelmRelease

    def __init__(self, name: str, args: MeshArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:mesh:Mesh", name, None, opts)
        # The CNI node agent runs privileged on every node.
        namespace = system_namespace(
            f"{name}-namespace", ISTIO_SYSTEM_NAMESPACE, "mesh", pulumi.ResourceOptions(parent=self), **PRIVILEGED
        )

        def release(suffix: str, chart: ChartPin, release_name: str, values: dict, after: list[pulumi.Resource]) -> HelmRelease:
            return helm_release(
                f"{name}-{suffix}",
                release_name,
                ISTIO_SYSTEM_NAMESPACE,
                chart,
                values,
                pulumi.ResourceOptions(parent=self, depends_on=after),
                chart_image_values=args.chart_image_values,
            )

        self.base = release("base", ISTIO_BASE, "istio-base", {}, [namespace])
        cni = release("cni", ISTIO_CNI, "istio-cni", {}, [self.base])
        self.istiod = release(
            "istiod", ISTIOD, "istiod", istiod_values(args.control_plane_replicas, args.spread_control_plane), [self.base, cni]
        )
        # The gateway pods mount it: it must exist before they start.
        overload = KubernetesObject(
            f"{name}-gateway-overload",
            gateway_overload_config_map(),
            pulumi.ResourceOptions(parent=self, depends_on=[namespace]),
        )
        on_aws = args.load_balancer is not None
        self.gateway = release(
            "gateway",
            ISTIO_GATEWAY,
            GATEWAY_SERVICE_ACCOUNT,
            gateway_values(
                args.nlb_idle_timeout_seconds if on_aws else None, args.load_balancer_scheme, args.spread_control_plane
            ),
            [self.istiod, overload, *([args.load_balancer] if args.load_balancer else [])],
        )
        if args.spread_control_plane:
            KubernetesObject(
                f"{name}-gateway-pdb", gateway_disruption_budget(), pulumi.ResourceOptions(parent=self, depends_on=[namespace])
            )
        self.register_outputs({"version": ISTIOD.version})
