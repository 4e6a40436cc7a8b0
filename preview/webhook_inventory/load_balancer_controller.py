"""The AWS Load Balancer Controller chart 3.5.0: its pod, Service, TargetGroupBinding and Ingress webhooks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .shapes import FAIL, IGNORE, MUTATING, VALIDATING, Installer, LabelSelector, Rule, Webhook, value_at

_LBC_AT = "kubernetes-sigs/aws-load-balancer-controller v3.5.0"
_LBC_WEBHOOKS = f"{_LBC_AT} helm/aws-load-balancer-controller/templates/webhook.yaml"
# Every webhook of the chart leaves out the controller's own pods and Services (webhook.yaml lines 36-48).
_LBC_NOT_ITSELF = ("app.kubernetes.io/name", "NotIn", ("aws-load-balancer-controller",))
_POD_CREATE = (Rule(("",), ("pods",), ("CREATE",)),)


def _lbc_label_selector(
    values: Mapping[str, Any], path: str, base: tuple[tuple[str, str, tuple[str, ...]], ...]
) -> LabelSelector:
    extra = LabelSelector.from_manifest(value_at(values, path, None) or {})
    return LabelSelector(extra.match_labels, (*base, *extra.expressions))


def aws_load_balancer_controller(values: Mapping[str, Any], namespace: str) -> Installer:
    """helm/aws-load-balancer-controller at v3.5.0 (the eks-charts 3.5.0 chart is byte-identical):
    both configurations always render (templates/webhook.yaml has no condition around either)."""
    webhooks = [
        *_pod_mutators(values),
        *_service_mutator(values),
        *_alb_target_control(),
        *_custom_resource_webhooks(),
        *_ingress_validator(values),
        *_global_accelerator_validator(values),
    ]
    return Installer(tuple(webhooks), ("elbv2.k8s.aws", "aga.k8s.aws", "gateway.k8s.aws"), _LBC_AT)


def _pod_mutators(values: Mapping[str, Any]) -> list[Webhook]:
    """The pod readiness gate's and the QUIC server id's injectors (lines 23 and 68)."""
    readiness_namespaces = value_at(values, "webhookNamespaceSelectors", None)
    pod_namespaces = LabelSelector.from_manifest({"matchExpressions": readiness_namespaces}) if readiness_namespaces else None
    pod_objects = _lbc_label_selector(values, "objectSelector", (_LBC_NOT_ITSELF,))
    return [
        Webhook(
            "mpod.elbv2.k8s.aws",
            MUTATING,
            str(value_at(values, "podMutatorWebhookConfig.failurePolicy", IGNORE)),
            _POD_CREATE,
            f"{_LBC_WEBHOOKS}:23",
            pod_namespaces or LabelSelector(expressions=(("elbv2.k8s.aws/pod-readiness-gate-inject", "In", ("enabled",)),)),
            pod_objects,
        ),
        Webhook(
            "quicid.elbv2.k8s.aws",
            MUTATING,
            FAIL,
            _POD_CREATE,
            f"{_LBC_WEBHOOKS}:68",
            pod_namespaces or LabelSelector(expressions=(("elbv2.k8s.aws/quic-server-id-inject", "In", ("enabled",)),)),
            pod_objects,
        ),
    ]


def _service_mutator(values: Mapping[str, Any]) -> list[Webhook]:
    """The Service mutator (line 114), unless `enableServiceMutatorWebhook` is false."""
    if not value_at(values, "enableServiceMutatorWebhook", True):
        return []
    scoped = value_at(values, "serviceMutatorWebhookConfig.namespaceSelectors", None)
    return [
        Webhook(
            "mservice.elbv2.k8s.aws",
            MUTATING,
            str(value_at(values, "serviceMutatorWebhookConfig.failurePolicy", FAIL)),
            (Rule(("",), ("services",), tuple(value_at(values, "serviceMutatorWebhookConfig.operations", ["CREATE"]))),),
            f"{_LBC_WEBHOOKS}:114",
            LabelSelector.from_manifest({"matchExpressions": scoped}) if scoped else None,
            _lbc_label_selector(values, "serviceMutatorWebhookConfig.objectSelector", (_LBC_NOT_ITSELF,)),
            note="every Service in the cluster unless narrowed",
        )
    ]


def _alb_target_control() -> list[Webhook]:
    """The ALB target control agent's injectors, by namespace and by pod (lines 156 and 194)."""
    return [
        Webhook(
            "alb-target-control.namespace.elbv2.k8s.aws",
            MUTATING,
            FAIL,
            _POD_CREATE,
            f"{_LBC_WEBHOOKS}:156",
            LabelSelector(expressions=(("elbv2.k8s.aws/alb-target-control-agent-injection", "In", ("enabled",)),)),
            LabelSelector(expressions=(_LBC_NOT_ITSELF, ("elbv2.k8s.aws/alb-target-control-agent-inject", "NotIn", ("false",)))),
        ),
        Webhook(
            "alb-target-control.object.elbv2.k8s.aws",
            MUTATING,
            FAIL,
            _POD_CREATE,
            f"{_LBC_WEBHOOKS}:194",
            LabelSelector(expressions=(("elbv2.k8s.aws/alb-target-control-agent-injection", "DoesNotExist", ()),)),
            LabelSelector(expressions=(_LBC_NOT_ITSELF, ("elbv2.k8s.aws/alb-target-control-agent-inject", "In", ("true",)))),
        ),
    ]


def _custom_resource_webhooks() -> list[Webhook]:
    """The TargetGroupBinding mutator and validator and the IngressClassParams validator (lines 230, 265 and 294)."""
    return [
        Webhook(
            "mtargetgroupbinding.elbv2.k8s.aws",
            MUTATING,
            FAIL,
            (Rule(("elbv2.k8s.aws",), ("targetgroupbindings",), ("CREATE", "UPDATE")),),
            f"{_LBC_WEBHOOKS}:230",
        ),
        Webhook(
            "vingressclassparams.elbv2.k8s.aws",
            VALIDATING,
            FAIL,
            (Rule(("elbv2.k8s.aws",), ("ingressclassparams",), ("CREATE", "UPDATE")),),
            f"{_LBC_WEBHOOKS}:265",
        ),
        Webhook(
            "vtargetgroupbinding.elbv2.k8s.aws",
            VALIDATING,
            FAIL,
            (Rule(("elbv2.k8s.aws",), ("targetgroupbindings",), ("CREATE", "UPDATE")),),
            f"{_LBC_WEBHOOKS}:294",
        ),
    ]


def _ingress_validator(values: Mapping[str, Any]) -> list[Webhook]:
    """The Ingress validator (line 319), unless `webhookConfig.disableIngressValidation`."""
    if value_at(values, "webhookConfig.disableIngressValidation", None):
        return []
    return [
        Webhook(
            "vingress.elbv2.k8s.aws",
            VALIDATING,
            # The chart's own spelling of the key (values.yaml line 234).
            str(value_at(values, "webhookConfig.ingressValdationFailurePolicy", FAIL)),
            (Rule(("networking.k8s.io",), ("ingresses",), ("CREATE", "UPDATE")),),
            f"{_LBC_WEBHOOKS}:319",
        )
    ]


def _global_accelerator_validator(values: Mapping[str, Any]) -> list[Webhook]:
    """The GlobalAccelerator validator (line 368), with the GlobalAcceleratorController feature gate only."""
    if not value_at(values, "controllerConfig.featureGates.GlobalAcceleratorController", False):
        return []
    return [
        Webhook(
            "vglobalaccelerator.aga.k8s.aws",
            VALIDATING,
            FAIL,
            (Rule(("aga.k8s.aws",), ("globalaccelerators",), ("CREATE", "UPDATE")),),
            f"{_LBC_WEBHOOKS}:368",
        )
    ]
