"""Knative Serving as the platform needs it (KnativeServing custom resource, pure)."""

from __future__ import annotations

from typing import Any

from platform_config.pins import KNATIVE_SERVING_VERSION

from ..constants import (
    GATEWAY_SELECTOR,
    KNATIVE_ACTIVATOR_GRACE_SECONDS,
    KNATIVE_LOCAL_GATEWAY_LISTENER_PORT,
    KNATIVE_SERVING_NAMESPACE,
    PULUMI_WAIT_FOR,
    standard_labels,
)
from .pod_parts import node_spread

# Pod fields model servers use that Knative admits only behind feature flags.
REQUIRED_FEATURES = (
    "kubernetes.podspec-nodeselector",
    "kubernetes.podspec-tolerations",
    "kubernetes.podspec-affinity",
    "kubernetes.podspec-securitycontext",
    "kubernetes.podspec-priorityclassname",
    "kubernetes.podspec-init-containers",
    "kubernetes.podspec-volumes-emptydir",
)


# Serving's control plane as the operator installs it (knative/operator knative-v1.23.0
# cmd/operator/kodata/knative-serving/1.23.0/2-serving-core.yaml, and net-istio's from
# cmd/operator/kodata/ingress/1.23/istio/net-istio.yaml): each Deployment's pods are labelled
# `app: <its name>`; only the activator and the webhook come with a PodDisruptionBudget, each
# `minAvailable: 80%` (activator-pdb, webhook-pdb), which at two replicas lets no pod be evicted (the
# disruption controller rounds a percentage up). Their anti-affinity is only preferred. The
# autoscaler-hpa Deployment (3-serving-hpa.yaml) serves Knative's HPA class only, which no model uses.
KNATIVE_CONTROL_PLANE: dict[str, str | None] = {
    "activator": "activator-pdb",
    "autoscaler": None,
    "controller": None,
    "webhook": "webhook-pdb",
    "net-istio-controller": None,
    "net-istio-webhook": None,
}
KNATIVE_BUNDLED_BUDGET = {"minAvailable": "80%"}
KNATIVE_POD_LABEL = "app"
# One pod away at a time, as the endpoint pickers' budgets.
KNATIVE_BUDGET = {"maxUnavailable": 1}


def knative_pods(deployment: str) -> dict[str, str]:
    """The labels of a control-plane Deployment's pods that select them (its manifest's `selector`)."""
    return {KNATIVE_POD_LABEL: deployment}


def knative_placement() -> dict[str, Any]:
    """What the KnativeServing sets for a highly available control plane besides its replicas:
    each Deployment one pod per node (`spec.workloads[].topologySpreadConstraints`, which replace
    the manifest's; the anti-affinity stays preferred), and the two budgets the manifests bundle
    overridden to one pod at a time (`spec.podDisruptionBudgets[]`, which can only override a budget
    of the manifest by its name). knative/operator knative-v1.23.0 pkg/apis/operator/base/common.go
    (WorkloadOverride, PodDisruptionBudgetOverride), pkg/reconciler/common/workload_override.go
    (replaceTopologySpreadConstraints) and poddisruptionbudget_override.go (minAvailable and
    maxUnavailable both replaced). A workload override without `replicas` leaves
    `high-availability` in charge of them (ha.go). The others' budgets are the platform's own
    objects (`knative_disruption_budgets`)."""
    return {
        "workloads": [
            {"name": name, "topologySpreadConstraints": node_spread(knative_pods(name), required=True)}
            for name in KNATIVE_CONTROL_PLANE
        ],
        "podDisruptionBudgets": [
            {"name": budget, **KNATIVE_BUDGET} for budget in KNATIVE_CONTROL_PLANE.values() if budget is not None
        ],
    }


def knative_disruption_budgets() -> list[dict[str, Any]]:
    """A PodDisruptionBudget for each control-plane Deployment whose manifest brings none: the
    operator leaves objects it did not install alone. One budget per pod: the eviction API refuses
    to evict a pod two budgets select (kubernetes pkg/registry/core/pod/storage/eviction.go)."""
    return [
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {
                "name": f"{name}-pdb",
                "namespace": KNATIVE_SERVING_NAMESPACE,
                "labels": standard_labels(f"{name}-pdb", "knative"),
            },
            "spec": {**KNATIVE_BUDGET, "selector": {"matchLabels": knative_pods(name)}},
        }
        for name, bundled in KNATIVE_CONTROL_PLANE.items()
        if bundled is None
    ]


def local_gateway() -> dict[str, Any]:
    """Knative's local gateway, on the ingress gateway's pods as net-istio ships it, but serving
    ISTIO_MUTUAL instead of plaintext: the gateway sends Knative-served versions there (the
    second pass through its own pods), and the gateway's authorization admits only the gateway's
    own mesh identity on that port (specs/gateway.py require_token), so no other workload can
    reach tenants' models through it without a token. The operator replaces the Gateway's
    servers with these (knative/operator knative-v1.23.0 pkg/reconciler/knativeserving/ingress/
    istio.go updateIstioGateway; IstioGatewayOverride in pkg/apis/operator/base/
    ingressconfiguration.go). The selector is net-istio's own, stated to tie the local gateway to
    the pods the platform's gateway objects select (the operator sets it on the
    knative-local-gateway Service too, ingress_service.go updateIstioService). net-istio's prober
    finds no Service port 8081 on the pods' labelled Service and so never probes this server
    (net-istio pkg/reconciler/ingress/lister.go listGatewayTargets), as before."""
    return {
        "selector": dict(GATEWAY_SELECTOR),
        "servers": [
            {
                "port": {"number": KNATIVE_LOCAL_GATEWAY_LISTENER_PORT, "name": "https", "protocol": "HTTPS"},
                "hosts": ["*"],
                "tls": {"mode": "ISTIO_MUTUAL"},
            }
        ],
    }


def knative_serving(high_availability: int | None = None) -> dict[str, Any]:
    """`high_availability`: the replicas of every Deployment of Serving's control plane the
    operator scales (activator, autoscaler, controller, webhook, net-istio's; knative/operator
    knative-v1.23.0 pkg/reconciler/common/ha.go HighAvailabilityTransform, the HPAs' minimum
    too), each one pod per node with its budget (`knative_placement`); None for the manifest's one
    each."""
    serving: dict[str, Any] = {
        "apiVersion": "operator.knative.dev/v1beta1",
        "kind": "KnativeServing",
        "metadata": {
            "name": "knative-serving",
            "namespace": KNATIVE_SERVING_NAMESPACE,
            # `pulumi up` waits until the operator reports Serving ready, which it does only once every
            # Deployment of its manifest is available, Knative's webhook included (knative/operator
            # knative-v1.23.0 pkg/apis/operator/v1beta1/knativeserving_lifecycle.go servingCondSet:
            # DeploymentsAvailable; pkg/reconciler/common/deployments.go CheckDeployments). The model
            # servers' Knative Services depend on this resource: without the wait they were sent before
            # the webhook could admit them, and pulumi-kubernetes retries a create only on NotFound/NoMatch.
            "annotations": {PULUMI_WAIT_FOR: "condition=Ready"},
        },
        "spec": {
            "version": KNATIVE_SERVING_VERSION,
            "ingress": {"istio": {"enabled": True, "knative-local-gateway": local_gateway()}},
            "config": {
                # Every value is a string: spec.config is map[string]map[string]string.
                "features": {feature: "enabled" for feature in REQUIRED_FEATURES},
                "autoscaler": {
                    "enable-scale-to-zero": "true",
                    "allow-zero-initial-scale": "true",
                    "scale-to-zero-grace-period": "30s",
                },
                "defaults": {
                    "revision-timeout-seconds": "300",
                    # Batch and summarisation requests may run for many minutes, but never past
                    # what the activator drains (the config checks hold every model to it).
                    "max-revision-timeout-seconds": str(KNATIVE_ACTIVATOR_GRACE_SECONDS),
                },
            },
        },
    }
    if high_availability is not None:
        serving["spec"]["high-availability"] = {"replicas": high_availability}
        serving["spec"].update(knative_placement())
    return serving
