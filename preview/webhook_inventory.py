"""What each installer the platform pins registers with the API server, as read upstream at its
pinned tag: its admission webhooks (failure policy, scope, what they intercept) and the API groups
of the custom resources it defines. The first-`up` stage (preview/first_up.py) holds every object
the program creates against this.

An installer is a Helm chart (by chart name, at the version platform_config/pins.py pins), or a
custom resource an operator reconciles into more objects (KnativeServing), or a file of CRDs. Each
chart's entry is a function of the release's values, following the chart's own template
conditions, cited per file and line at the tag: a webhook the values switch off is not listed, a
failure policy the values pick is the one picked. What an operator registers at runtime (Knative
fills its webhooks' rules when its webhook starts) is cited to the code that does it.

A chart the table does not know is reported as unread, not assumed empty.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from components.inference_extension import INFERENCE_POOL_CRDS_URL, LLM_D_CRDS_URL

MUTATING, VALIDATING = "mutating", "validating"
FAIL, IGNORE = "Fail", "Ignore"
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class UnreadValues(Exception):
    """An installer given values, or a version, outside what was read at its tag."""


@dataclass(frozen=True)
class LabelSelector:
    """metav1.LabelSelector: every label of match_labels and every expression must hold."""

    match_labels: Mapping[str, str] = field(default_factory=dict)
    # (key, operator, values): In, NotIn, Exists, DoesNotExist
    expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(key) != value for key, value in self.match_labels.items()):
            return False
        for key, operator, values in self.expressions:
            if operator not in SELECTOR_OPERATORS:
                # The API server refuses such a selector; it selects nothing here.
                return False
            present = key in labels
            if operator == "In" and not (present and labels[key] in values):
                return False
            if operator == "NotIn" and present and labels[key] in values:
                return False
            if operator == "Exists" and not present:
                return False
            if operator == "DoesNotExist" and present:
                return False
        return True

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in self.match_labels.items()]
        for key, operator, values in self.expressions:
            parts.append(f"{key} {operator}" + (f" [{', '.join(values)}]" if values else ""))
        return ", ".join(parts) or "everything"

    @classmethod
    def from_manifest(cls, selector: Mapping[str, Any]) -> LabelSelector:
        return cls(
            match_labels=dict(selector.get("matchLabels") or {}),
            expressions=tuple(
                (str(e["key"]), str(e["operator"]), tuple(str(v) for v in e.get("values") or ()))
                for e in selector.get("matchExpressions") or ()
            ),
        )


@dataclass(frozen=True)
class Rule:
    """One rule of a webhook: API groups ("" is core), plural resources, operations; "*" is any."""

    groups: tuple[str, ...]
    resources: tuple[str, ...]
    operations: tuple[str, ...] = ("CREATE",)

    def matches(self, group: str, resource: str, operation: str) -> bool:
        return (
            ("*" in self.groups or group in self.groups)
            and ("*" in self.resources or resource in self.resources)
            and ("*" in self.operations or operation in self.operations)
        )

    def describe(self) -> str:
        groups = ",".join(g or "core" for g in self.groups)
        return f"{groups}/{','.join(self.resources)} {','.join(self.operations)}"


@dataclass(frozen=True)
class Webhook:
    name: str
    kind: str  # MUTATING or VALIDATING
    # As the API server holds it while the platform's first `up` runs.
    failure_policy: str
    rules: tuple[Rule, ...]
    # Where it is read, at the installer's pinned tag.
    source: str
    namespace_selector: LabelSelector | None = None
    object_selector: LabelSelector | None = None
    note: str = ""
    # False for a mutating webhook whose handler changes nothing (Kueue's no-op handler for an
    # integration it is not given).
    mutates: bool = True
    # The chart whose release answers it, where another than the one registering it (Istio's base
    # chart registers the default validator; istiod serves it).
    served_by: str | None = None

    def intercepts(
        self, group: str, resource: str, operation: str, namespace_labels: Mapping[str, str] | None, labels: Mapping[str, str]
    ) -> bool:
        """The API server's matching (k8s.io/apiserver pkg/admission/plugin/webhook/predicates): a rule,
        the namespace selector against the object's namespace (a Namespace against its own labels; it
        does not apply to other cluster-scoped objects), the object selector against its labels."""
        if not any(rule.matches(group, resource, operation) for rule in self.rules):
            return False
        if self.namespace_selector is not None and namespace_labels is not None:
            if not self.namespace_selector.matches(namespace_labels):
                return False
        return self.object_selector is None or self.object_selector.matches(labels)

    @property
    def blocks_or_changes(self) -> bool:
        """Whether an object created while it cannot answer comes out wrong: refused (Fail), or let
        through without what a mutating webhook would have added (Ignore)."""
        return self.failure_policy == FAIL or (self.kind == MUTATING and self.mutates)


@dataclass(frozen=True)
class Installer:
    """What one installer registers, for the values (or spec) it is given."""

    webhooks: tuple[Webhook, ...]
    # API groups of the custom resources it defines.
    crd_groups: tuple[str, ...]
    # The repository and tag it was read at.
    read_at: str


# What a chart's release registers, given its values and namespace.
ChartInstaller = Callable[[Mapping[str, Any], str], Installer]


def _get(values: Mapping[str, Any], path: str, default: Any) -> Any:
    node: Any = values
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


# --- Kueue ---------------------------------------------------------------------------------

_KUEUE_AT = "kubernetes-sigs/kueue v0.19.2"
_KUEUE_WEBHOOKS = f"{_KUEUE_AT} charts/kueue/templates/webhook/manifests.yaml"
# (name, line, group, resource, operations, namespace-scoped by managedJobsNamespaceSelector,
# the framework whose presence makes it Fail rather than Ignore, None if always Fail)
_KUEUE_ENTRIES: tuple[tuple[str, int, str, str, tuple[str, ...], bool, str | None], ...] = (
    ("mappwrapper.kb.io", 41, "workload.codeflare.dev", "appwrappers", ("CREATE",), True, None),
    ("mclusterqueue.kb.io", 72, "kueue.x-k8s.io", "clusterqueues", ("CREATE",), False, None),
    ("mdeployment.kb.io", 91, "apps", "deployments", ("CREATE", "UPDATE"), True, "deployment"),
    ("mjaxjob.kb.io", 128, "kubeflow.org", "jaxjobs", ("CREATE",), True, None),
    ("mjob.kb.io", 159, "batch", "jobs", ("CREATE",), True, None),
    ("mjobset.kb.io", 190, "jobset.x-k8s.io", "jobsets", ("CREATE",), True, None),
    ("mleaderworkerset.kb.io", 221, "leaderworkerset.x-k8s.io", "leaderworkersets", ("CREATE", "UPDATE"), True, None),
    ("mmpijob.kb.io", 253, "kubeflow.org", "mpijobs", ("CREATE",), True, None),
    ("mpaddlejob.kb.io", 284, "kubeflow.org", "paddlejobs", ("CREATE",), True, None),
    ("mpod.kb.io", 314, "", "pods", ("CREATE",), True, "pod"),
    ("mpytorchjob.kb.io", 350, "kubeflow.org", "pytorchjobs", ("CREATE",), True, None),
    ("mraycluster.kb.io", 381, "ray.io", "rayclusters", ("CREATE",), True, None),
    ("mrayjob.kb.io", 412, "ray.io", "rayjobs", ("CREATE",), True, None),
    ("mrayservice.kb.io", 443, "ray.io", "rayservices", ("CREATE",), True, None),
    ("mresourceflavor.kb.io", 474, "kueue.x-k8s.io", "resourceflavors", ("CREATE",), False, None),
    ("msparkapplication.kb.io", 494, "sparkoperator.k8s.io", "sparkapplications", ("CREATE",), True, None),
    ("mstatefulset.kb.io", 524, "apps", "statefulsets", ("CREATE", "UPDATE"), True, "statefulset"),
    ("mtfjob.kb.io", 561, "kubeflow.org", "tfjobs", ("CREATE",), True, None),
    ("mtrainjob.kb.io", 592, "trainer.kubeflow.org", "trainjobs", ("CREATE",), True, None),
    ("mworkload.kb.io", 623, "kueue.x-k8s.io", "workloads", ("CREATE",), False, None),
    ("mxgboostjob.kb.io", 643, "kubeflow.org", "xgboostjobs", ("CREATE",), True, None),
    ("vappwrapper.kb.io", 687, "workload.codeflare.dev", "appwrappers", ("CREATE", "UPDATE"), True, None),
    ("vclusterqueue.kb.io", 718, "kueue.x-k8s.io", "clusterqueues", ("CREATE", "UPDATE"), False, None),
    ("vcohort.kb.io", 738, "kueue.x-k8s.io", "cohorts", ("CREATE", "UPDATE"), False, None),
    ("vdeployment.kb.io", 757, "apps", "deployments", ("CREATE", "UPDATE"), True, "deployment"),
    ("vjaxjob.kb.io", 793, "kubeflow.org", "jaxjobs", ("CREATE", "UPDATE"), True, None),
    ("vjob.kb.io", 824, "batch", "jobs", ("CREATE", "UPDATE"), True, None),
    ("vjobset.kb.io", 855, "jobset.x-k8s.io", "jobsets", ("CREATE", "UPDATE"), True, None),
    ("vleaderworkerset.kb.io", 886, "leaderworkerset.x-k8s.io", "leaderworkersets", ("CREATE", "UPDATE"), True, None),
    ("vmpijob.kb.io", 917, "kubeflow.org", "mpijobs", ("CREATE", "UPDATE"), True, None),
    ("vpaddlejob.kb.io", 948, "kubeflow.org", "paddlejobs", ("CREATE", "UPDATE"), True, None),
    ("vpod.kb.io", 978, "", "pods", ("CREATE", "UPDATE"), True, "pod"),
    ("vpytorchjob.kb.io", 1014, "kubeflow.org", "pytorchjobs", ("CREATE", "UPDATE"), True, None),
    ("vraycluster.kb.io", 1045, "ray.io", "rayclusters", ("CREATE", "UPDATE"), True, None),
    ("vrayjob.kb.io", 1076, "ray.io", "rayjobs", ("CREATE", "UPDATE"), True, None),
    ("vrayservice.kb.io", 1107, "ray.io", "rayservices", ("CREATE", "UPDATE"), True, None),
    ("vresourceflavor.kb.io", 1138, "kueue.x-k8s.io", "resourceflavors", ("CREATE", "UPDATE"), False, None),
    ("vsparkapplication.kb.io", 1158, "sparkoperator.k8s.io", "sparkapplications", ("CREATE", "UPDATE"), True, None),
    ("vstatefulset.kb.io", 1188, "apps", "statefulsets", ("CREATE", "UPDATE"), True, "statefulset"),
    ("vtfjob.kb.io", 1224, "kubeflow.org", "tfjobs", ("CREATE", "UPDATE"), True, None),
    ("vtrainjob.kb.io", 1255, "trainer.kubeflow.org", "trainjobs", ("CREATE", "UPDATE"), True, None),
    ("vworkload.kb.io", 1286, "kueue.x-k8s.io", "workloads", ("CREATE", "UPDATE"), False, None),
    ("vxgboostjob.kb.io", 1307, "kubeflow.org", "xgboostjobs", ("CREATE", "UPDATE"), True, None),
)


# charts/kueue/values.yaml `managerConfig.controllerManagerConfigYaml` `integrations.frameworks`
# (lines 165-184): what the chart's own config enables when the values do not replace it.
CHART_DEFAULT_FRAMEWORKS = (
    "batch/job",
    "kubeflow.org/mpijob",
    "ray.io/rayjob",
    "ray.io/rayservice",
    "ray.io/raycluster",
    "jobset.x-k8s.io/jobset",
    "workload.codeflare.dev/appwrapper",
    "trainer.kubeflow.org/trainjob",
    "pod",
    "deployment",
    "statefulset",
    "leaderworkerset.x-k8s.io/leaderworkerset",
)


def kueue(values: Mapping[str, Any], namespace: str) -> Installer:
    """charts/kueue/templates/webhook/manifests.yaml renders all 43 entries whatever the values (its
    only conditions: lines 19-20 parse the manager config with `fromYaml`; deployment, pod and
    statefulset entries are Fail only when their framework is in `integrations.frameworks`, else
    Ignore, e.g. lines 92-96; every job-type entry's namespaceSelector is the config's
    `managedJobsNamespaceSelector` verbatim, else `kubernetes.io/metadata.name NotIn [kube-system,
    <release namespace>]`, lines 160-170). No entry has an objectSelector."""
    text = _get(values, "managerConfig.controllerManagerConfigYaml", None)
    config = (yaml.safe_load(text) if isinstance(text, str) else None) or {
        "integrations": {"frameworks": list(CHART_DEFAULT_FRAMEWORKS)}
    }
    frameworks = set((config.get("integrations") or {}).get("frameworks") or ())
    scoped = config.get("managedJobsNamespaceSelector")
    namespace_selector = (
        LabelSelector.from_manifest(scoped)
        if isinstance(scoped, Mapping)
        else LabelSelector(expressions=(("kubernetes.io/metadata.name", "NotIn", ("kube-system", namespace)),))
    )
    webhooks = tuple(
        Webhook(
            name=name,
            kind=MUTATING if name.startswith("m") else VALIDATING,
            failure_policy=FAIL if framework is None or framework in frameworks else IGNORE,
            rules=(Rule((group,), (resource,), operations),),
            source=f"{_KUEUE_WEBHOOKS}:{line}",
            namespace_selector=namespace_selector if namespaced else None,
            # pkg/controller/jobframework/setup.go lines 72-114: an integration not in the list
            # gets `WithNoopWebhook(true)`, which admits everything unchanged.
            mutates=framework is None or framework in frameworks,
        )
        for name, line, group, resource, operations, namespaced, framework in _KUEUE_ENTRIES
    )
    return Installer(webhooks, ("kueue.x-k8s.io",), _KUEUE_AT)


# --- Istio ---------------------------------------------------------------------------------

_ISTIO_AT = "istio/istio 1.30.3"
_ISTIO_GROUPS = ("security.istio.io", "networking.istio.io", "telemetry.istio.io", "extensions.istio.io")
_ISTIO_VALIDATION_RULE = Rule(_ISTIO_GROUPS, ("*",), ("CREATE", "UPDATE"))
_ISTIO_VALIDATION_NOTE = (
    "rendered Ignore on install (lines 46-56, `not .Release.IsUpgrade`); istiod sets Fail once it answers "
    "(pkg/webhooks/validation/controller/controller.go lines 273-277)"
)


def _istio_validation_policy(values: Mapping[str, Any]) -> str:
    """Both validators' failure policy on install (lines 46-56 of each template): Fail with a CA bundle
    given, else `base.validationFailurePolicy`, else Ignore."""
    if _get(values, "base.validationCABundle", ""):
        return FAIL
    return str(_get(values, "base.validationFailurePolicy", "") or IGNORE)


def istio_base(values: Mapping[str, Any], namespace: str) -> Installer:
    """manifests/charts/base: the default-revision validator (templates/defaultrevision-
    validatingwebhookconfiguration.yaml, rendered when `global.resourceScope` is all or cluster and
    `defaultRevision` is not empty, lines 1-2) and the 15 Istio CRDs as templates (templates/crds.yaml
    line 5, `base.enableCRDTemplates`, default true; none has a conversion webhook)."""
    scope = _get(values, "global.resourceScope", "all")
    webhooks: tuple[Webhook, ...] = ()
    if scope in ("all", "cluster") and _get(values, "defaultRevision", "default") != "":
        webhooks = (
            Webhook(
                "validation.istio.io",
                VALIDATING,
                _istio_validation_policy(values),
                (_ISTIO_VALIDATION_RULE,),
                f"{_ISTIO_AT} manifests/charts/base/templates/defaultrevision-validatingwebhookconfiguration.yaml:15",
                note=_ISTIO_VALIDATION_NOTE,
                # Its service is istiod (lines 32-44).
                served_by="istiod",
            ),
        )
    crds = _ISTIO_GROUPS if scope in ("all", "cluster") and _get(values, "base.enableCRDTemplates", True) else ()
    return Installer(webhooks, crds, _ISTIO_AT)


_ISTIO_DISCOVERY = f"{_ISTIO_AT} manifests/charts/istio-control/istio-discovery/templates"
_INJECTOR = f"{_ISTIO_DISCOVERY}/mutatingwebhook.yaml"
_NO_REV = ("istio.io/rev", "DoesNotExist", ())
_NO_INJECTION_LABEL = ("istio-injection", "DoesNotExist", ())
_NOT_OPTED_OUT = ("sidecar.istio.io/inject", "NotIn", ("false",))


def istiod(values: Mapping[str, Any], namespace: str) -> Installer:
    """manifests/charts/istio-control/istio-discovery: the sidecar injector (templates/
    mutatingwebhook.yaml, unless `global.operatorManageWebhooks`; four entries with no revision and
    `sidecarInjectorWebhook.enableNamespacesByDefault` false, pods CREATE, Fail, never changed at
    runtime) and the revision's validator (templates/validatingwebhookconfiguration.yaml, unless
    `global.configValidation` is false; only objects labelled istio.io/rev=default). A pod created
    before the injector is registered keeps no sidecar for its life (pkg/kube/inject/webhook.go has
    no pod watch); the gateway's keeps the image `auto`."""
    for key in ("revision", "revisionTags", "istiodRemote.enabled"):
        if _get(values, key, None):
            raise UnreadValues(f"`{key}` is set: its webhooks were read for the default revision of a local istiod")
    webhooks: list[Webhook] = []
    pods = (Rule(("",), ("pods",), ("CREATE",)),)
    scoped = _get(values, "global.resourceScope", "all") in ("all", "cluster")
    injects = scoped and not _get(values, "global.operatorManageWebhooks", False)
    if injects and _get(values, "sidecarInjectorWebhook.enableNamespacesByDefault", False):
        # The `auto.` entry (lines 146-164): every pod of a namespace without either label, but for
        # the ones Istio never injects (kube-system, kube-public, kube-node-lease, local-path-storage).
        webhooks.append(
            Webhook(
                "auto.sidecar-injector.istio.io",
                MUTATING,
                FAIL,
                pods,
                f"{_INJECTOR}:146",
                LabelSelector(
                    expressions=(
                        _NO_INJECTION_LABEL,
                        _NO_REV,
                        (
                            "kubernetes.io/metadata.name",
                            "NotIn",
                            ("kube-system", "kube-public", "kube-node-lease", "local-path-storage"),
                        ),
                    )
                ),
                LabelSelector(expressions=(("sidecar.istio.io/inject", "DoesNotExist", ()), _NO_REV)),
            )
        )
    if scoped:
        if injects:
            webhooks += [
                Webhook(
                    "rev.namespace.sidecar-injector.istio.io",
                    MUTATING,
                    FAIL,
                    pods,
                    f"{_INJECTOR}:67",
                    LabelSelector(expressions=(("istio.io/rev", "In", ("default",)), _NO_INJECTION_LABEL)),
                    LabelSelector(expressions=(_NOT_OPTED_OUT,)),
                ),
                Webhook(
                    "rev.object.sidecar-injector.istio.io",
                    MUTATING,
                    FAIL,
                    pods,
                    f"{_INJECTOR}:88",
                    LabelSelector(expressions=(_NO_REV, _NO_INJECTION_LABEL)),
                    LabelSelector(expressions=(_NOT_OPTED_OUT, ("istio.io/rev", "In", ("default",)))),
                ),
                Webhook(
                    "namespace.sidecar-injector.istio.io",
                    MUTATING,
                    FAIL,
                    pods,
                    f"{_INJECTOR}:115",
                    LabelSelector(expressions=(("istio-injection", "In", ("enabled",)),)),
                    LabelSelector(expressions=(_NOT_OPTED_OUT,)),
                ),
                Webhook(
                    "object.sidecar-injector.istio.io",
                    MUTATING,
                    FAIL,
                    pods,
                    f"{_INJECTOR}:130",
                    LabelSelector(expressions=(_NO_INJECTION_LABEL, _NO_REV)),
                    LabelSelector(expressions=(("sidecar.istio.io/inject", "In", ("true",)), _NO_REV)),
                ),
            ]
        if _get(values, "global.configValidation", True):
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
    return Installer(tuple(webhooks), (), _ISTIO_AT)


def no_webhooks(read_at: str, crd_groups: tuple[str, ...] = ()) -> ChartInstaller:
    """A chart that registers no admission webhook (read at `read_at`)."""
    return lambda values, namespace: Installer((), crd_groups, read_at)


# --- files of CRDs ---------------------------------------------------------------------------

# The CRD files the program applies (components/inference_extension.py), by URL.
CRD_FILES: dict[str, tuple[str, ...]] = {
    INFERENCE_POOL_CRDS_URL: ("inference.networking.k8s.io",),
    LLM_D_CRDS_URL: ("llm-d.ai",),
}


# --- Knative -------------------------------------------------------------------------------

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


# --- AWS Load Balancer Controller ---------------------------------------------------------

_LBC_AT = "kubernetes-sigs/aws-load-balancer-controller v3.5.0"
_LBC_WEBHOOKS = f"{_LBC_AT} helm/aws-load-balancer-controller/templates/webhook.yaml"
# Every webhook of the chart leaves out the controller's own pods and Services (webhook.yaml lines 36-48).
_LBC_NOT_ITSELF = ("app.kubernetes.io/name", "NotIn", ("aws-load-balancer-controller",))


def _lbc_label_selector(
    values: Mapping[str, Any], path: str, base: tuple[tuple[str, str, tuple[str, ...]], ...]
) -> LabelSelector:
    extra = LabelSelector.from_manifest(_get(values, path, None) or {})
    return LabelSelector(extra.match_labels, (*base, *extra.expressions))


def aws_load_balancer_controller(values: Mapping[str, Any], namespace: str) -> Installer:
    """helm/aws-load-balancer-controller at v3.5.0 (the eks-charts 3.5.0 chart is byte-identical):
    both configurations always render (templates/webhook.yaml has no condition around either)."""
    pods = (Rule(("",), ("pods",), ("CREATE",)),)
    readiness_namespaces = _get(values, "webhookNamespaceSelectors", None)
    pod_namespaces = LabelSelector.from_manifest({"matchExpressions": readiness_namespaces}) if readiness_namespaces else None
    pod_objects = _lbc_label_selector(values, "objectSelector", (_LBC_NOT_ITSELF,))
    webhooks = [
        Webhook(
            "mpod.elbv2.k8s.aws",
            MUTATING,
            str(_get(values, "podMutatorWebhookConfig.failurePolicy", IGNORE)),
            pods,
            f"{_LBC_WEBHOOKS}:23",
            pod_namespaces or LabelSelector(expressions=(("elbv2.k8s.aws/pod-readiness-gate-inject", "In", ("enabled",)),)),
            pod_objects,
        ),
        Webhook(
            "quicid.elbv2.k8s.aws",
            MUTATING,
            FAIL,
            pods,
            f"{_LBC_WEBHOOKS}:68",
            pod_namespaces or LabelSelector(expressions=(("elbv2.k8s.aws/quic-server-id-inject", "In", ("enabled",)),)),
            pod_objects,
        ),
    ]
    if _get(values, "enableServiceMutatorWebhook", True):
        scoped = _get(values, "serviceMutatorWebhookConfig.namespaceSelectors", None)
        webhooks.append(
            Webhook(
                "mservice.elbv2.k8s.aws",
                MUTATING,
                str(_get(values, "serviceMutatorWebhookConfig.failurePolicy", FAIL)),
                (Rule(("",), ("services",), tuple(_get(values, "serviceMutatorWebhookConfig.operations", ["CREATE"]))),),
                f"{_LBC_WEBHOOKS}:114",
                LabelSelector.from_manifest({"matchExpressions": scoped}) if scoped else None,
                _lbc_label_selector(values, "serviceMutatorWebhookConfig.objectSelector", (_LBC_NOT_ITSELF,)),
                note="every Service in the cluster unless narrowed",
            )
        )
    webhooks += [
        Webhook(
            "alb-target-control.namespace.elbv2.k8s.aws",
            MUTATING,
            FAIL,
            pods,
            f"{_LBC_WEBHOOKS}:156",
            LabelSelector(expressions=(("elbv2.k8s.aws/alb-target-control-agent-injection", "In", ("enabled",)),)),
            LabelSelector(expressions=(_LBC_NOT_ITSELF, ("elbv2.k8s.aws/alb-target-control-agent-inject", "NotIn", ("false",)))),
        ),
        Webhook(
            "alb-target-control.object.elbv2.k8s.aws",
            MUTATING,
            FAIL,
            pods,
            f"{_LBC_WEBHOOKS}:194",
            LabelSelector(expressions=(("elbv2.k8s.aws/alb-target-control-agent-injection", "DoesNotExist", ()),)),
            LabelSelector(expressions=(_LBC_NOT_ITSELF, ("elbv2.k8s.aws/alb-target-control-agent-inject", "In", ("true",)))),
        ),
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
    if not _get(values, "webhookConfig.disableIngressValidation", None):
        webhooks.append(
            Webhook(
                "vingress.elbv2.k8s.aws",
                VALIDATING,
                # The chart's own spelling of the key (values.yaml line 234).
                str(_get(values, "webhookConfig.ingressValdationFailurePolicy", FAIL)),
                (Rule(("networking.k8s.io",), ("ingresses",), ("CREATE", "UPDATE")),),
                f"{_LBC_WEBHOOKS}:319",
            )
        )
    if _get(values, "controllerConfig.featureGates.GlobalAcceleratorController", False):
        webhooks.append(
            Webhook(
                "vglobalaccelerator.aga.k8s.aws",
                VALIDATING,
                FAIL,
                (Rule(("aga.k8s.aws",), ("globalaccelerators",), ("CREATE", "UPDATE")),),
                f"{_LBC_WEBHOOKS}:368",
            )
        )
    return Installer(tuple(webhooks), ("elbv2.k8s.aws", "aga.k8s.aws", "gateway.k8s.aws"), _LBC_AT)


# --- kube-prometheus-stack -----------------------------------------------------------------

_KPS_AT = "prometheus-community/helm-charts kube-prometheus-stack-81.4.3"
_KPS_WEBHOOKS = f"{_KPS_AT} charts/kube-prometheus-stack/templates/prometheus-operator/admission-webhooks"


def kube_prometheus_stack(values: Mapping[str, Any], namespace: str) -> Installer:
    """The operator's admission webhooks (admission-webhooks/*WebhookConfiguration.yaml, gated at line 1
    on `prometheusOperator.enabled` and `prometheusOperator.admissionWebhooks.enabled`, both true by
    default). The failure policy (lines 16-24): IgnoreOnInstallOnly is Ignore on install; a policy set
    is that policy; else Ignore while `admissionWebhooks.patch.enabled` (default true), else Fail."""
    hooks = "prometheusOperator.admissionWebhooks"
    webhooks: tuple[Webhook, ...] = ()
    if _get(values, "prometheusOperator.enabled", True) and _get(values, f"{hooks}.enabled", True):
        chosen = _get(values, f"{hooks}.failurePolicy", "")
        if chosen == "IgnoreOnInstallOnly":
            policy = IGNORE
        elif chosen:
            policy = str(chosen)
        else:
            policy = IGNORE if _get(values, f"{hooks}.patch.enabled", True) else FAIL
        scoped = _get(values, f"{hooks}.namespaceSelector", None)
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
    crds = ("monitoring.coreos.com",) if _get(values, "crds.enabled", True) else ()
    return Installer(webhooks, crds, _KPS_AT)


# --- the table -----------------------------------------------------------------------------

_NVIDIA_AT = "NVIDIA/gpu-operator v25.10.1"
# By chart name (the last segment of an OCI reference): the chart versions read, and what a release
# of one registers. A release of another version is reported as unread: a bump is read again first.
CHARTS: dict[str, tuple[tuple[str, ...], ChartInstaller]] = {
    "base": (("1.30.3",), istio_base),
    "istiod": (("1.30.3",), istiod),
    # manifests/charts/gateway and manifests/charts/istio-cni at 1.30.3: no webhook configuration.
    "gateway": (("1.30.3",), no_webhooks(_ISTIO_AT)),
    "cni": (("1.30.3",), no_webhooks(_ISTIO_AT)),
    "knative-operator": (("v1.23.0",), knative_operator),
    "kueue": (("0.19.2",), kueue),
    "aws-load-balancer-controller": (("3.5.0",), aws_load_balancer_controller),
    "kube-prometheus-stack": (("81.4.3",), kube_prometheus_stack),
    # deployments/gpu-operator at v25.10.1, its node-feature-discovery 0.18.2 subchart included.
    "gpu-operator": (("v25.10.1",), no_webhooks(_NVIDIA_AT, ("nvidia.com", "nfd.k8s-sigs.io"))),
    # charts/prometheus-adapter at prometheus-adapter-5.3.0: APIServices only.
    "prometheus-adapter": (("5.3.0",), no_webhooks("prometheus-community/helm-charts prometheus-adapter-5.3.0")),
    # charts/metrics-server at metrics-server-helm-chart-3.13.1: the v1beta1.metrics.k8s.io APIService only.
    "metrics-server": (("3.13.1",), no_webhooks("kubernetes-sigs/metrics-server metrics-server-helm-chart-3.13.1")),
    # charts/cluster-autoscaler at cluster-autoscaler-chart-<version>: no webhook configuration.
    "cluster-autoscaler": (
        ("9.37.0", "9.43.1", "9.46.6", "9.51.0", "9.53.0"),
        no_webhooks("kubernetes/autoscaler cluster-autoscaler-chart-9.37.0 to 9.53.0"),
    ),
}
