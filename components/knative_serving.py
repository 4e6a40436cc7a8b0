"""Knative Serving, installed through the Knative Operator (pinned Helm release) and a
KnativeServing resource that enables the pod features model servers need."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pulumi
import pulumi_kubernetes as k8s

from platform_config.chart_images import ChartImageValues
from platform_config.pins import KNATIVE_OPERATOR

from .constants import KNATIVE_OPERATOR_NAMESPACE, KNATIVE_SERVING_NAMESPACE, PACKAGE
from .k8s_objects import KubernetesObject, custom_resource, helm_release, system_namespace
from .specs.knative import knative_disruption_budgets, knative_serving


@dataclass(frozen=True)
class KnativeServingArgs:
    # The Istio control plane (Knative's net-istio needs its CRDs).
    depends_on: tuple[pulumi.Resource, ...] = ()
    # Replicas of Serving's control plane where more than the manifest's one are wanted
    # (production: FLOORS.control_plane_replicas_in_production), then one pod per node behind budgets.
    high_availability: int | None = None
    # The values that pin the charts' images to the image lock's digests (`Plan.chart_image_values`).
    chart_image_values: ChartImageValues = field(default_factory=dict)


class KnativeServing(pulumi.ComponentResource):
    # Declared for the type checker only: pulumi evaluates a resource class's annotations at each registration
    # (pulumi 3.272.0 _types.resource_types, uncached), importing what they name.
    if TYPE_CHECKING:
        serving: k8s.apiextensions.CustomResource

    def __init__(self, name: str, args: KnativeServingArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:knative-serving:KnativeServing", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        operator_ns = system_namespace(f"{name}-operator-namespace", KNATIVE_OPERATOR_NAMESPACE, "knative", child)
        operator = helm_release(
            f"{name}-operator",
            "knative-operator",
            KNATIVE_OPERATOR_NAMESPACE,
            KNATIVE_OPERATOR,
            {},
            pulumi.ResourceOptions(parent=self, depends_on=[operator_ns]),
            chart_image_values=args.chart_image_values,
        )
        # The activator must speak mTLS to STRICT tenant namespaces: give it a sidecar.
        serving_ns = system_namespace(
            f"{name}-namespace", KNATIVE_SERVING_NAMESPACE, "knative", child, **{"istio-injection": "enabled"}
        )
        spec = knative_serving(args.high_availability)
        self.serving = custom_resource(
            f"{name}-serving", spec, pulumi.ResourceOptions(parent=self, depends_on=[operator, serving_ns, *args.depends_on])
        )
        if args.high_availability is not None:
            # The budgets the manifests do not bring, once the operator has installed them.
            after = pulumi.ResourceOptions(parent=self, depends_on=[self.serving])
            for budget in knative_disruption_budgets():
                KubernetesObject(f"{name}-{budget['metadata']['name']}", budget, after)
        self.register_outputs({"version": spec["spec"]["version"]})
