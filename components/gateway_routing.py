"""The platform's shared ingress: the Istio Gateway, who may call it (JWT verification, a token
required, the version override kept to named principals), the gateway filter (tiers and users
from the token, model header, body limits, sticky buckets, vLLM priorities) and the tier subsets
of models behind a shared gateway."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from platform_config.models import TrafficConfig

from .constants import PACKAGE
from .k8s_objects import custom_resource
from .shapes import RoutePlan
from .specs import gateway, routes


@dataclass(frozen=True)
class GatewayRoutingArgs:
    traffic: TrafficConfig
    # Every model's routes: the filter's per-model settings, the shared gateways' subsets.
    routes: tuple[RoutePlan, ...]
    depends_on: tuple[pulumi.Resource, ...] = ()


class GatewayRouting(pulumi.ComponentResource):
    def __init__(self, name: str, args: GatewayRoutingArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:gateway-routing:GatewayRouting", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        custom_resource(f"{name}-gateway", gateway.gateway(args.traffic), child)
        custom_resource(f"{name}-filter", gateway.envoy_filter(args.traffic, args.routes), child)
        for policy in gateway.access_policies(args.traffic, args.routes):
            custom_resource(f"{name}-{policy['metadata']['name']}", policy, child)
        # The shared rules of backends whose versions sit behind a shared gateway (Knative's).
        for suffix, rule in routes.shared_destination_rules(args.routes).items():
            custom_resource(f"{name}-{suffix}", rule, child)
        self.register_outputs({"gateway": gateway.GATEWAY_NAME, "hosts": list(args.traffic.hosts)})
