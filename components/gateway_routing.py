"""The platform's shared ingress: the Istio Gateway, the gateway filter (tiers, model header,
sticky buckets, vLLM priorities) and the tier subsets of Knative-served models."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from platform_config.models import PlatformConfig

from .constants import PACKAGE
from .k8s_objects import custom_resource
from .specs import traffic


@dataclass(frozen=True)
class GatewayRoutingArgs:
    config: PlatformConfig
    depends_on: tuple[pulumi.Resource, ...] = ()


class GatewayRouting(pulumi.ComponentResource):
    def __init__(self, name: str, args: GatewayRoutingArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:gateway-routing:GatewayRouting", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        custom_resource(f"{name}-gateway", traffic.gateway(args.config), child)
        custom_resource(f"{name}-filter", traffic.envoy_filter(args.config), child)
        rule = traffic.knative_gateway_destination_rule(args.config)
        if rule is not None:
            custom_resource(f"{name}-knative-tiers", rule, child)
        self.register_outputs({"gateway": traffic.GATEWAY_NAME, "hosts": list(args.config.traffic.hosts)})
