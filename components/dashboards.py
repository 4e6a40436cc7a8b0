"""A Grafana dashboard: its JSON in a ConfigMap that kube-prometheus-stack's Grafana sidecar loads
(components/specs/dashboards.py builds both). The platform declares the overview, and each model
its own, in its tenant's namespace next to its PrometheusRule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from .constants import PACKAGE
from .k8s_objects import KubernetesObject
from .specs.dashboards import dashboard_config_map


@dataclass(frozen=True)
class DashboardArgs:
    namespace: str
    # The dashboard's JSON model (model_dashboard / platform_overview_dashboard).
    dashboard: dict[str, Any]
    # The namespace it goes in; Grafana itself is not needed first: the sidecar finds the
    # ConfigMap whenever it starts.
    depends_on: tuple[pulumi.Resource, ...] = ()


class Dashboard(pulumi.ComponentResource):
    def __init__(self, name: str, args: DashboardArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:dashboards:Dashboard", name, None, opts)
        KubernetesObject(
            f"{name}-config-map",
            dashboard_config_map(name, args.namespace, args.dashboard),
            pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        self.register_outputs({"uid": args.dashboard["uid"], "title": args.dashboard["title"]})
