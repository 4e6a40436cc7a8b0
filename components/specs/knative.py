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
)

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
    too), None for the manifest's one each."""
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
    return serving
