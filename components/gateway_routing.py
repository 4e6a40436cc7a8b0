"""The platform's shared ingress: the Istio Gateway, the gateway filter (tiers, model header,
sticky buckets, vLLM priorities) and the tier subsets of models behind a shared gateway."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from platform_config.models import PlatformConfig

from .backends import BACKENDS
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
        # The shared rules of backends whose versions sit behind a shared gateway (Knative's).
        for backend in BACKENDS.values():
            rule = traffic.shared_destination_rule(args.config, backend)
            if rule is not None and backend.shared_destination_rule is not None:
                custom_resource(f"{name}-{backend.shared_destination_rule[1]}", rule, child)
        self.register_outputs({"gateway": traffic.GATEWAY_NAME, "hosts": list(args.config.traffic.hosts)})
