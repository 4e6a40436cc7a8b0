"""kube-prometheus-stack 81.4.3: the Prometheus Operator's admission webhooks and its CRDs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .shapes import FAIL, IGNORE, MUTATING, VALIDATING, Installer, LabelSelector, Rule, Webhook, value_at

_KPS_AT = "prometheus-community/helm-charts kube-prometheus-stack-81.4.3"
_KPS_WEBHOOKS = f"{_KPS_AT} charts/kube-prometheus-stack/templates/prometheus-operator/admission-webhooks"


def kube_prometheus_stack(values: Mapping[str, Any], namespace: str) -> Installer:
    """The operator's admission webhooks (admission-webhooks/*WebhookConfiguration.yaml, gated at line 1
    on `prometheusOperator.enabled` and `prometheusOperator.admissionWebhooks.enabled`, both true by
    default). The failure policy (lines 16-24): IgnoreOnInstallOnly is Ignore on install; a policy set
    is that policy; else Ignore while `admissionWebhooks.patch.enabled` (default true), else Fail."""
    hooks = "prometheusOperator.admissionWebhooks"
    webhooks: tuple[Webhook, ...] = ()
    if value_at(values, "prometheusOperator.enabled", True) and value_at(values, f"{hooks}.enabled", True):
        chosen = value_at(values, f"{hooks}.failurePolicy", "")
        if chosen == "IgnoreOnInstallOnly":
            policy = IGNORE
        elif chosen:
            policy = str(chosen)
        else:
            policy = IGNORE if value_at(values, f"{hooks}.patch.enabled", True) else FAIL
        scoped = value_at(values, f"{hooks}.namespaceSelector", None)
        selector = LabelSelector.from_manifest(scoped) if scoped else None
        rules = Rule(("monitoring.coreos.com",), ("prometheusrules",), ("CREATE", "UPDATE"))
        webhooks = (
            Webhook(
                "prometheusrulemutate.monitoring.coreos.com",
                MUTATING,
                policy,
                (rules,),
                f"{_KPS_WEBHOOKS}/mutatingWebhookConfiguration.yaml:15",
                selector,
            ),
            Webhook(
                "prometheusrulevalidate.monitoring.coreos.com",
                VALIDATING,
                policy,
                (rules,),
                f"{_KPS_WEBHOOKS}/validatingWebhookConfiguration.yaml:15",
                selector,
            ),
            Webhook(
                "alertmanagerconfigsvalidate.monitoring.coreos.com",
                VALIDATING,
                policy,
                (Rule(("monitoring.coreos.com",), ("alertmanagerconfigs",), ("CREATE", "UPDATE")),),
                f"{_KPS_WEBHOOKS}/validatingWebhookConfiguration.yaml:85",
                selector,
            ),
        )
    crds = ("monitoring.coreos.com",) if value_at(values, "crds.enabled", True) else ()
    return Installer(webhooks, crds, _KPS_AT)
