"""The egress gateway: the pinned Istio gateway chart installed a second time, behind a ClusterIP Service in its own
namespace, through which every tenant's workloads reach the hosts they name exactly, each tenant only its own
(components/specs/egress_gateway.py builds what it declares, and says how the connections run)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pulumi

from platform_config.chart_images import ChartImageValues
from platform_config.pins import ISTIO_GATEWAY

from .constants import EGRESS_GATEWAY_NAME, EGRESS_GATEWAY_NAMESPACE, PACKAGE
from .k8s_objects import HelmRelease, KubernetesObject, custom_resource, helm_release
from .serving import TenantEgress
from .specs import egress_gateway as specs
from .specs.egress_gateway import EgressRoute
from .specs.network import ExternalHost, exact_hosts


def resolved_routes(hosts: Sequence[ExternalHost], region: pulumi.Input[str] | None) -> pulumi.Output[list[EgressRoute]]:
    """The hosts at the stack's region (None where nothing reads S3, so no host names one)."""
    return pulumi.Output.from_input(region or "").apply(lambda r: [EgressRoute(h.key, h.name(r)) for h in hosts])


def routed(build: Callable[[Sequence[EgressRoute]], dict[str, Any]], routes: pulumi.Output[list[EgressRoute]]) -> dict[str, Any]:
    """A manifest whose spec names the routes' hosts (an Output, at the region), its metadata as `build` makes it
    for none."""
    return {**build([]), "spec": routes.apply(lambda rs: build(rs)["spec"])}


@dataclass(frozen=True)
class EgressGatewayArgs:
    # By tenant, where its workloads connect out (Plan.egress): the hosts of those they reach by exact name
    # (network.exact_hosts) go through the gateway; and the region S3's hosts are in (None without EKS, where nothing
    # reads S3).
    egress: Mapping[str, TenantEgress]
    region: pulumi.Input[str] | None
    # istiod injects the gateway's pods (their container image is `auto`), and its CRDs come with the base chart.
    istiod: pulumi.Resource
    mesh_crds: pulumi.Resource
    # The fewest pods (production: FLOORS.control_plane_replicas_in_production), one per node behind a disruption
    # budget (`spread`), on the EKS system node group where there is one.
    replicas: int = 1
    spread: bool = False
    node_selector: Mapping[str, str] | None = None
    chart_image_values: ChartImageValues = field(default_factory=dict)


class EgressGateway(pulumi.ComponentResource):
    # Declared for the type checker only: pulumi evaluates a resource class's annotations at each registration
    # (pulumi 3.272.0 _types.resource_types, uncached), importing what they name.
    if TYPE_CHECKING:
        release: HelmRelease
        # By tenant, the hosts that go through the gateway, which its own routes name.
        hosts: dict[str, tuple[ExternalHost, ...]]
        # What every tenant's pods need before they start: the gateway running and its routes in place (ready_for adds a
        # tenant's own authorization).
        ready: tuple[pulumi.Resource, ...]
        # By tenant, its authorization at the gateway, where it reaches any host through it.
        authorizations: dict[str, pulumi.Resource]

    def __init__(self, name: str, args: EgressGatewayArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:egress-gateway:EgressGateway", name, None, opts)
        s3 = args.region is not None
        self.hosts = {tenant: exact_hosts(e.buckets if s3 else (), e.hugging_face) for tenant, e in args.egress.items()}
        namespace = KubernetesObject(f"{name}-namespace", specs.egress_gateway_namespace(), pulumi.ResourceOptions(parent=self))
        inside = pulumi.ResourceOptions(parent=self, depends_on=[namespace])
        # Its pods need DNS and istiod from their start.
        policies = [
            KubernetesObject(f"{name}-{policy['metadata']['name']}", policy, inside)
            for policy in specs.egress_gateway_network_policies()
        ]
        self.release = helm_release(
            f"{name}-release",
            EGRESS_GATEWAY_NAME,
            EGRESS_GATEWAY_NAMESPACE,
            ISTIO_GATEWAY,
            specs.egress_gateway_values(args.replicas, spread=args.spread, node_selector=args.node_selector),
            pulumi.ResourceOptions(parent=self, depends_on=[namespace, *policies, args.istiod]),
            chart_image_values=args.chart_image_values,
        )
        if args.spread:
            KubernetesObject(f"{name}-pdb", specs.egress_gateway_disruption_budget(), inside)
        mesh = pulumi.ResourceOptions(parent=self, depends_on=[namespace, args.mesh_crds])
        distinct = list({host.key: host for hosts in self.hosts.values() for host in hosts}.values())
        routes = resolved_routes(distinct, args.region)
        ready: list[pulumi.Resource] = [self.release, custom_resource(f"{name}-allow-nothing", specs.allow_nothing(), mesh)]
        if distinct:
            ready.append(custom_resource(f"{name}-tenant-hosts", routed(specs.external_hosts, routes), mesh))
            ready.append(custom_resource(f"{name}-gateway", routed(specs.gateway, routes), mesh))
            for i, host in enumerate(distinct):
                build = self._forward(i, host)
                ready.append(custom_resource(f"{name}-forward-{host.key}", routed(build, routes), mesh))
        self.ready = tuple(ready)
        self.authorizations = {}
        for tenant, hosts in sorted(self.hosts.items()):
            if hosts:
                authorization = routed(self._authorization(tenant), resolved_routes(hosts, args.region))
                self.authorizations[tenant] = custom_resource(f"{name}-tenant-{tenant}", authorization, mesh)
        self.register_outputs({"version": ISTIO_GATEWAY.version})

    def ready_for(self, tenant: str) -> tuple[pulumi.Resource, ...]:
        """What a tenant's pods need before they start: the gateway running, its routes and the tenant's own
        authorization in place (not every tenant's: that grew as models x tenants, in the dependencies and in the SDK's
        cycle check of each)."""
        own = self.authorizations.get(tenant)
        return (*self.ready, own) if own is not None else self.ready

    @staticmethod
    def _authorization(tenant: str) -> Callable[[Sequence[EgressRoute]], dict[str, Any]]:
        """The tenant_authorization builder of a tenant, over its routes' hosts."""
        return lambda rs: specs.tenant_authorization(tenant, [r.host for r in rs])

    @staticmethod
    def _forward(index: int, host: ExternalHost) -> Callable[[Sequence[EgressRoute]], dict[str, Any]]:
        """The forward_route builder of the `index`th host among the routes (its metadata named by the host's key)."""
        return lambda rs: specs.forward_route(rs[index] if rs else EgressRoute(host.key, ""))
