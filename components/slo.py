"""A model's service level objectives: its PrometheusRule of recording rules and burn-rate alerts
(components/specs/slo_rules.py), picked up by the Prometheus Operator from the tenant's namespace
(kube-prometheus-stack selects rules of every namespace, components/monitoring.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from .constants import PACKAGE
from .k8s_objects import custom_resource
from .slo_plan import SloPlan
from .specs.slo_rules import prometheus_rule


@dataclass(frozen=True)
class ModelSloArgs:
    slo: SloPlan
    # What the rule needs first: its namespace, and the Prometheus Operator (its CRD), when the
    # platform installs it; like the servers' monitors, the rule is declared either way, for the
    # cluster's own operator otherwise.
    depends_on: tuple[pulumi.Resource, ...] = ()


class ModelSlo(pulumi.ComponentResource):
    def __init__(self, name: str, args: ModelSloArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:slo:ModelSlo", name, None, opts)
        rule = prometheus_rule(args.slo)
        custom_resource(f"{name}-rule", rule, pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)))
        latency = args.slo.latency
        self.register_outputs(
            {
                "availabilityObjective": args.slo.availability_objective,
                "latencyObjective": latency.objective if latency else None,
                "latencyThresholdMs": latency.threshold_ms if latency else None,
            }
        )
