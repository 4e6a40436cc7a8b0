"""Knative Serving, installed through the Knative Operator (pinned Helm release) and a
KnativeServing resource that enables the pod features model servers need."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from .constants import KNATIVE_OPERATOR_CHART, KNATIVE_OPERATOR_NAMESPACE, KNATIVE_SERVING_NAMESPACE, PACKAGE, standard_labels
from .k8s_objects import custom_resource
from .specs.knative import knative_serving


@dataclass(frozen=True)
class KnativeServingArgs:
    max_timeout_seconds: int
    # The Istio control plane (Knative's net-istio needs its CRDs).
    depends_on: tuple[pulumi.Resource, ...] = ()


class KnativeServing(pulumi.ComponentResource):
    serving: k8s.apiextensions.CustomResource

    def __init__(self, name: str, args: KnativeServingArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:knative-serving:KnativeServing", name, None, opts)
        operator_ns = k8s.core.v1.Namespace(
            f"{name}-operator-namespace",
            metadata={"name": KNATIVE_OPERATOR_NAMESPACE, "labels": standard_labels(KNATIVE_OPERATOR_NAMESPACE, "knative")},
            opts=pulumi.ResourceOptions(parent=self),
        )
        operator = k8s.helm.v3.Release(
            f"{name}-operator",
            name="knative-operator",
            namespace=KNATIVE_OPERATOR_NAMESPACE,
            chart=KNATIVE_OPERATOR_CHART.chart,
            version=KNATIVE_OPERATOR_CHART.version,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=KNATIVE_OPERATOR_CHART.repo),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[operator_ns]),
        )
        serving_ns = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={
                "name": KNATIVE_SERVING_NAMESPACE,
                # The activator must speak mTLS to STRICT tenant namespaces: give it a sidecar.
                "labels": {**standard_labels(KNATIVE_SERVING_NAMESPACE, "knative"), "istio-injection": "enabled"},
            },
            opts=pulumi.ResourceOptions(parent=self),
        )
        spec = knative_serving(args.max_timeout_seconds)
        self.serving = custom_resource(
            f"{name}-serving", spec, pulumi.ResourceOptions(parent=self, depends_on=[operator, serving_ns, *args.depends_on])
        )
        self.register_outputs({"version": spec["spec"]["version"]})
