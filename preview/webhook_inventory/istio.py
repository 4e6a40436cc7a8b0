"""Istio 1.30.3: the base chart's validator and CRDs, istiod's injector and validator."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.specs.network import NAMESPACE_NAME_LABEL

from .shapes import FAIL, IGNORE, MUTATING, VALIDATING, Installer, LabelSelector, Rule, UnreadValues, Webhook, value_at

ISTIO_READ_AT = "istio/istio 1.30.3"
_ISTIO_GROUPS = ("security.istio.io", "networking.istio.io", "telemetry.istio.io", "extensions.istio.io")
_ISTIO_VALIDATION_RULE = Rule(_ISTIO_GROUPS, ("*",), ("CREATE", "UPDATE"))
_ISTIO_VALIDATION_NOTE = (
    "rendered Ignore on install (lines 46-56, `not .Release.IsUpgrade`); istiod sets Fail once it answers "
    "(pkg/webhooks/validation/controller/controller.go lines 273-277)"
)


def _istio_validation_policy(values: Mapping[str, Any]) -> str:
    """Both validators' failure policy on install (lines 46-56 of each template): Fail with a CA bundle
    given, else `base.validationFailurePolicy`, else Ignore."""
    if value_at(values, "base.validationCABundle", ""):
        return FAIL
    return str(value_at(values, "base.validationFailurePolicy", "") or IGNORE)


def istio_base(values: Mapping[str, Any], namespace: str) -> Installer:
    """manifests/charts/base: the default-revision validator (templates/defaultrevision-
    validatingwebhookconfiguration.yaml, rendered when `global.resourceScope` is all or cluster and
    `defaultRevision` is not empty, lines 1-2) and the 15 Istio CRDs as templates (templates/crds.yaml
    line 5, `base.enableCRDTemplates`, default true; none has a conversion webhook)."""
    scope = value_at(values, "global.resourceScope", "all")
    webhooks: tuple[Webhook, ...] = ()
    if scope in ("all", "cluster") and value_at(values, "defaultRevision", "default") != "":
        webhooks = (
            Webhook(
                "validation.istio.io",
                VALIDATING,
                _istio_validation_policy(values),
                (_ISTIO_VALIDATION_RULE,),
                f"{ISTIO_READ_AT} manifests/charts/base/templates/defaultrevision-validatingwebhookconfiguration.yaml:15",
                note=_ISTIO_VALIDATION_NOTE,
                # Its service is istiod (lines 32-44).
                served_by="istiod",
            ),
        )
    crds = _ISTIO_GROUPS if scope in ("all", "cluster") and value_at(values, "base.enableCRDTemplates", True) else ()
    return Installer(webhooks, crds, ISTIO_READ_AT)


_ISTIO_DISCOVERY = f"{ISTIO_READ_AT} manifests/charts/istio-control/istio-discovery/templates"
_INJECTOR = f"{_ISTIO_DISCOVERY}/mutatingwebhook.yaml"
_NO_REV = ("istio.io/rev", "DoesNotExist", ())
_NO_INJECTION_LABEL = ("istio-injection", "DoesNotExist", ())
_NOT_OPTED_OUT = ("sidecar.istio.io/inject", "NotIn", ("false",))
# Every entry of the injector intercepts pods as they are created.
_POD_CREATE = (Rule(("",), ("pods",), ("CREATE",)),)


def istiod(values: Mapping[str, Any], namespace: str) -> Installer:
    """manifests/charts/istio-control/istio-discovery: the sidecar injector (templates/
    mutatingwebhook.yaml, unless `global.operatorManageWebhooks`; four entries with no revision and
    `sidecarInjectorWebhook.enableNamespacesByDefault` false, pods CREATE, Fail, never changed at
    runtime) and the revision's validator (templates/validatingwebhookconfiguration.yaml, unless
    `global.configValidation` is false; only objects labelled istio.io/rev=default). A pod created
    before the injector is registered keeps no sidecar for its life (pkg/kube/inject/webhook.go has
    no pod watch); the gateway's keeps the image `auto`."""
    for key in ("revision", "revisionTags", "istiodRemote.enabled"):
        if value_at(values, key, None):
            raise UnreadValues(f"`{key}` is set: its webhooks were read for the default revision of a local istiod")
    webhooks: list[Webhook] = []
    scoped = value_at(values, "global.resourceScope", "all") in ("all", "cluster")
    if scoped and not value_at(values, "global.operatorManageWebhooks", False):
        webhooks += _injector_webhooks(values)
    if scoped and value_at(values, "global.configValidation", True):
        webhooks.append(
            Webhook(
                "rev.validation.istio.io",
                VALIDATING,
                _istio_validation_policy(values),
                (_ISTIO_VALIDATION_RULE,),
                f"{_ISTIO_DISCOVERY}/validatingwebhookconfiguration.yaml:19",
                object_selector=LabelSelector(expressions=(("istio.io/rev", "In", ("default",)),)),
                note=_ISTIO_VALIDATION_NOTE,
            )
        )
    return Installer(tuple(webhooks), (), ISTIO_READ_AT)


def _injector_webhooks(values: Mapping[str, Any]) -> list[Webhook]:
    """templates/mutatingwebhook.yaml's entries for the default revision (at lines 67, 88, 115 and 130), after the
    `auto.` one where `sidecarInjectorWebhook.enableNamespacesByDefault` is set."""
    auto = [_auto_injector()] if value_at(values, "sidecarInjectorWebhook.enableNamespacesByDefault", False) else []
    return [
        *auto,
        Webhook(
            "rev.namespace.sidecar-injector.istio.io",
            MUTATING,
            FAIL,
            _POD_CREATE,
            f"{_INJECTOR}:67",
            LabelSelector(expressions=(("istio.io/rev", "In", ("default",)), _NO_INJECTION_LABEL)),
            LabelSelector(expressions=(_NOT_OPTED_OUT,)),
        ),
        Webhook(
            "rev.object.sidecar-injector.istio.io",
            MUTATING,
            FAIL,
            _POD_CREATE,
            f"{_INJECTOR}:88",
            LabelSelector(expressions=(_NO_REV, _NO_INJECTION_LABEL)),
            LabelSelector(expressions=(_NOT_OPTED_OUT, ("istio.io/rev", "In", ("default",)))),
        ),
        Webhook(
            "namespace.sidecar-injector.istio.io",
            MUTATING,
            FAIL,
            _POD_CREATE,
            f"{_INJECTOR}:115",
            LabelSelector(expressions=(("istio-injection", "In", ("enabled",)),)),
            LabelSelector(expressions=(_NOT_OPTED_OUT,)),
        ),
        Webhook(
            "object.sidecar-injector.istio.io",
            MUTATING,
            FAIL,
            _POD_CREATE,
            f"{_INJECTOR}:130",
            LabelSelector(expressions=(_NO_INJECTION_LABEL, _NO_REV)),
            LabelSelector(expressions=(("sidecar.istio.io/inject", "In", ("true",)), _NO_REV)),
        ),
    ]


def _auto_injector() -> Webhook:
    """The `auto.` entry (lines 146-164): every pod of a namespace without either label, but for the ones Istio never
    injects (kube-system, kube-public, kube-node-lease, local-path-storage)."""
    return Webhook(
        "auto.sidecar-injector.istio.io",
        MUTATING,
        FAIL,
        _POD_CREATE,
        f"{_INJECTOR}:146",
        LabelSelector(
            expressions=(
                _NO_INJECTION_LABEL,
                _NO_REV,
                (
                    NAMESPACE_NAME_LABEL,
                    "NotIn",
                    ("kube-system", "kube-public", "kube-node-lease", "local-path-storage"),
                ),
            )
        ),
        LabelSelector(expressions=(("sidecar.istio.io/inject", "DoesNotExist", ()), _NO_REV)),
    )
