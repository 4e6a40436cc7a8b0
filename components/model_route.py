"""How requests reach a model's versions: its VirtualService (override, sticky, weighted routes
per tier) and, unless its backend's versions sit behind a shared gateway, the DestinationRule
with a subset per version and tier."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pulumi

from platform_config.release import to_output

from .constants import PACKAGE
from .k8s_objects import custom_resource
from .shapes import RoutePlan
from .specs import routes


def canary_releases(plans: Iterable[RoutePlan]) -> dict[str, dict[str, Any]]:
    """Every model's release, by model name: the program's `canaryReleases` output, which the next
    deployment hands the policy pack as `previousReleases` (`python -m preview.previous_releases`)."""
    return {plan.model.name: to_output(routes.model_release(plan.model)) for plan in plans}


@dataclass(frozen=True)
class ModelRouteArgs:
    route: RoutePlan
    depends_on: tuple[pulumi.Resource, ...] = ()


class ModelRoute(pulumi.ComponentResource):
    def __init__(self, name: str, args: ModelRouteArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:model-route:ModelRoute", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        model = args.route.model
        service = routes.virtual_service(args.route)
        custom_resource(f"{name}-virtual-service", service, child)
        # The model's own subsets, unless its backend puts them on a shared gateway's rule.
        if args.route.backend.shared_rule(model) is None:
            for rule in routes.destination_rules(args.route):
                # The model's one rule keeps its resource name; per-version rules (`<model>-<version>-epp`)
                # add what follows the model's name.
                suffix = rule["metadata"]["name"].removeprefix(model.name)
                custom_resource(f"{name}-destination-rule{suffix}", rule, child)
        release = model.release
        self.register_outputs(
            {
                "servedModelName": model.openai_name,
                "stable": release.stable,
                "canary": release.canary,
                "canaryWeight": release.canary_weight,
                "routes": [route["name"] for route in service["spec"]["http"]],
            }
        )
