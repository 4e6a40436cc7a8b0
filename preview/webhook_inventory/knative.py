"""The Knative operator v1.23.0, and what it installs for a KnativeServing (Serving 1.23.0, net-istio 1.23)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .shapes import FAIL, MUTATING, VALIDATING, Installer, LabelSelector, Rule, Webhook

_KNATIVE_AT = "knative/operator knative-v1.23.0"
_SERVING_CORE = "cmd/operator/kodata/knative-serving/1.23.0/2-serving-core.yaml"
_NET_ISTIO = "cmd/operator/kodata/ingress/1.23/istio/net-istio.yaml"
# knative/serving knative-v1.23.0 cmd/webhook/main.go lines 54-68: the types its defaulting and
# validation webhooks are given; knative/pkg webhook/resourcesemantics (defaulting.go lines 194-207,
# validation/reconcile_config.go lines 107-149) writes one rule per type, resource and /status.
_KNATIVE_RULE_GROUPS = ("serving.knative.dev", "autoscaling.internal.knative.dev", "networking.internal.knative.dev")
_KNATIVE_RESOURCES = (
    "services",
    "configurations",
    "routes",
    "revisions",
    "domainmappings",
    "podautoscalers",
    "metrics",
    "certificates",
    "ingresses",
    "serverlessservices",
)
_KNATIVE_NOT_EXCLUDED = LabelSelector(expressions=(("webhooks.knative.dev/exclude", "DoesNotExist", ()),))
_KNATIVE_CONFIG_MAPS = Rule(("",), ("configmaps",), ("CREATE", "UPDATE"))


# The Serving releases read (KnativeServing `spec.version`): the operator's kodata
# knative-serving/1.23.0 and ingress/1.23.
KNATIVE_SERVING_VERSIONS = ("1.23", "1.23.0")


def knative_operator(values: Mapping[str, Any], namespace: str) -> Installer:
    """config/charts/knative-operator at knative-v1.23.0: no admission webhook (its operator-webhook
    serves only CRD conversion, cmd/webhook/main.go lines 42-45, for CRDs that serve one version)."""
    return Installer((), ("operator.knative.dev",), _KNATIVE_AT)


def knative_serving(spec: Mapping[str, Any]) -> Installer:
    """What the operator installs for a KnativeServing at Serving 1.23 (the kodata the operator
    ships): Serving's three webhooks, all Fail (2-serving-core.yaml lines 9397-9536; rules and the
    `webhooks.knative.dev/exclude` namespace selector rewritten when the webhook starts), and, with
    Istio as the ingress (the default, pkg/reconciler/knativeserving/ingress/ingress.go lines 63-77),
    net-istio's two (net-istio.yaml lines 603-665). Its Ready condition waits for every Deployment of
    the manifest, the webhooks' included (pkg/reconciler/common/deployments.go lines 52-124)."""
    serving = f"{_KNATIVE_AT} {_SERVING_CORE}"
    webhooks = [
        Webhook(
            "webhook.serving.knative.dev",
            MUTATING,
            FAIL,
            (Rule(_KNATIVE_RULE_GROUPS, _KNATIVE_RESOURCES, ("CREATE", "UPDATE")),),
            f"{serving}:9454",
            namespace_selector=_KNATIVE_NOT_EXCLUDED,
        ),
        Webhook(
            "validation.webhook.serving.knative.dev",
            VALIDATING,
            FAIL,
            (Rule(_KNATIVE_RULE_GROUPS, _KNATIVE_RESOURCES, ("CREATE", "UPDATE", "DELETE")),),
            f"{serving}:9511",
            namespace_selector=_KNATIVE_NOT_EXCLUDED,
        ),
        Webhook(
            "config.webhook.serving.knative.dev",
            VALIDATING,
            FAIL,
            (_KNATIVE_CONFIG_MAPS,),
            f"{serving}:9412",
            object_selector=LabelSelector(
                expressions=(
                    ("app.kubernetes.io/name", "In", ("knative-serving",)),
                    (
                        "app.kubernetes.io/component",
                        "In",
                        ("autoscaler", "controller", "logging", "networking", "observability", "tracing", "net-certmanager"),
                    ),
                )
            ),
        ),
    ]
    ingress = spec.get("ingress") or {}
    istio = (ingress.get("istio") or {}).get("enabled")
    others = any((ingress.get(name) or {}).get("enabled") for name in ("kourier", "contour"))
    if istio or not others:
        net_istio = f"{_KNATIVE_AT} {_NET_ISTIO}"
        webhooks += [
            Webhook(
                "webhook.istio.networking.internal.knative.dev",
                MUTATING,
                FAIL,
                (Rule(("apps",), ("deployments",), ("CREATE", "UPDATE")),),
                f"{net_istio}:625",
                namespace_selector=_KNATIVE_NOT_EXCLUDED,
                object_selector=LabelSelector(expressions=(("serving.knative.dev/configuration", "Exists", ()),)),
                note="Revision Deployments only (net-istio cmd/webhook/main.go lines 53-65)",
            ),
            Webhook(
                "config.webhook.istio.networking.internal.knative.dev",
                VALIDATING,
                FAIL,
                (_KNATIVE_CONFIG_MAPS,),
                f"{net_istio}:661",
                object_selector=LabelSelector(
                    {"app.kubernetes.io/name": "knative-serving", "app.kubernetes.io/component": "net-istio"}
                ),
            ),
        ]
    groups = (*_KNATIVE_RULE_GROUPS, "caching.internal.knative.dev")
    return Installer(tuple(webhooks), groups, _KNATIVE_AT)
