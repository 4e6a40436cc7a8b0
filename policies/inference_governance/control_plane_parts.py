"""What every request depends on, read where the program sets it: each part's replicas, how its pods are spread over
nodes and the PodDisruptionBudgets its chart or operator makes of what the program gives it (control_plane.py holds
them to production's floors)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from .endpoint_pickers import endpoint_pickers
from .kube import FACTS, GATEWAY_SELECTOR, HELM_RELEASE, get, is_list, name_of, namespace_of, selector_matches, whole_number
from .workloads import of_type

KNATIVE_SERVING_CR = "kubernetes:operator.knative.dev/v1beta1:KnativeServing"
# The labels that select each chart's pods, and Knative Serving's control plane as the operator installs it
# (components/policy_facts.py, from components/specs/knative.py, which cites the manifests).
PODS: Mapping[str, Any] = FACTS["controlPlane"]
KNATIVE: Mapping[str, Any] = PODS["knative"]
HOSTNAME = "kubernetes.io/hostname"
# istiod's chart defaults (istio 1.30.3 manifests/charts/istio-control/istio-discovery/values.yaml): the budget is
# on (global.defaultPodDisruptionBudget.enabled) with pdb.minAvailable 1. The chart merges the release's values over
# them (templates/zzz_profile.yaml, mustMergeOverwrite), where a null leaves the default.
ISTIOD_BUDGET_MIN_AVAILABLE = 1
# The cluster autoscaler chart's default budget (kubernetes/autoscaler cluster-autoscaler-chart-9.37.0 to 9.53.0
# charts/cluster-autoscaler/values.yaml `podDisruptionBudget`), which Helm merges the release's map into (a null
# deletes a key, or the whole budget: templates/pdb.yaml renders none for an empty or false value).
AUTOSCALER_BUDGET = {"maxUnavailable": 1}
# Kueue's chart (kubernetes-sigs/kueue v0.19.2 charts/kueue/values.yaml controllerManager.podDisruptionBudget):
# off unless enabled, minAvailable 1 (templates/manager/manager-pdb.yaml).
KUEUE_BUDGET_MIN_AVAILABLE = 1


@dataclass(frozen=True)
class Budget:
    """A PodDisruptionBudget a chart or the Knative operator makes of the program's values: its spec, the key it is
    set by, what to set there for one pod at a time, and why the installer refuses it, if it does."""

    key: str
    spec: Mapping[str, Any]
    fix: str
    refused: str | None = None


@dataclass
class Part:
    """One part of what every request depends on, as the program declares it: what it is, the object that sets it
    (`urn`), the labels that select its pods, and where its replicas, spread and budget are set."""

    what: str
    urn: str
    namespace: str
    pods: Mapping[str, str]
    replicas: Any
    replicas_key: str
    # The pod spec's topologySpreadConstraints and affinity, as the pods get them.
    constraints: Any
    affinity: Any
    spread_key: str
    # What declares its budget when none does.
    budget_key: str
    budgets: list[Budget] = field(default_factory=list)
    picker: bool = False


def spreads_over_nodes(part: Part) -> bool:
    """Whether no two of its pods may share a node: a constraint by hostname that refuses to schedule past a skew of
    one (DoNotSchedule), or a required pod anti-affinity by hostname, selecting its pods."""
    constraints = part.constraints if is_list(part.constraints) else []
    for constraint in constraints:
        if (
            get(constraint, "topologyKey") == HOSTNAME
            and get(constraint, "whenUnsatisfiable") == "DoNotSchedule"
            and whole_number(get(constraint, "maxSkew")) == 1
            and _selects(get(constraint, "labelSelector"), part.pods)
        ):
            return True
    terms = get(part.affinity, "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution", default=[])
    return any(
        get(term, "topologyKey") == HOSTNAME and _selects(get(term, "labelSelector"), part.pods)
        for term in (terms if is_list(terms) else [])
    )


def _selects(selector: Any, pods: Mapping[str, str]) -> bool:
    return isinstance(selector, Mapping) and selector_matches(selector, pods)


def _release(release: Any) -> tuple[str, str, Mapping[str, Any]]:
    namespace = get(release.props, "namespace", default="?")
    chart = str(get(release.props, "chart", default="")).rsplit("/", 1)[-1]
    where = f"Helm release {namespace}/{get(release.props, 'name', default='?')}"
    return chart, where, get(release.props, "values", default={}) or {}


def _autoscaled(values: Mapping[str, Any], enabled: tuple[str, ...], minimum: tuple[str, ...]) -> tuple[Any, str]:
    """A chart's replica floor from its values, and its key: the autoscaler's minimum unless it is turned off,
    then the fixed count (`replicaCount`); the chart's default (1) where neither is given."""
    if get(values, *enabled, default=True) is not False:
        return get(values, *minimum, default=1), ".".join(minimum)
    return get(values, "replicaCount", default=1), "replicaCount"


def _istiod(release: Any, where: str, values: Mapping[str, Any]) -> Part:
    """templates/poddisruptionbudget.yaml at 1.30.3: with global.defaultPodDisruptionBudget.enabled (and more than
    one replica), `pdb.minAvailable` unless `pdb` has a maxUnavailable key, then that; neither if both are unset or
    zero."""
    budgets = []
    if get(values, "global", "defaultPodDisruptionBudget", "enabled", default=True) is not False:
        pdb = get(values, "pdb", default={}) or {}
        minimum = get(pdb, "minAvailable", default=ISTIOD_BUDGET_MIN_AVAILABLE)
        maximum = get(pdb, "maxUnavailable")
        spec = {"minAvailable": minimum} if minimum and maximum is None else {"maxUnavailable": maximum} if maximum else {}
        budgets.append(Budget("pdb", spec, "pdb.minAvailable to 1 (and no pdb.maxUnavailable)"))
    return Part(
        f"istiod ({where})",
        release.urn,
        get(release.props, "namespace", default=""),
        PODS["istiod"],
        *_autoscaled(values, ("autoscaleEnabled",), ("autoscaleMin",)),
        get(values, "topologySpreadConstraints"),
        get(values, "affinity"),
        "topologySpreadConstraints",
        "global.defaultPodDisruptionBudget.enabled",
        budgets,
    )


def gateway_pod_labels(release: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, str]:
    """The labels a gateway chart's release selects its pods by: `app` its `labels.app` or its name, `istio` its
    `labels.istio` or its name less "istio-" (istio 1.30.3 manifests/charts/gateway/templates/_helpers.tpl
    "gateway.name", "gateway.selectorLabels"): an ingress or an egress gateway alike."""
    name = str(get(values, "name", default="") or get(release, "name", default="") or "istio-ingressgateway")
    labels = get(values, "labels", default={}) or {}
    return {"app": str(labels.get("app") or name), "istio": str(labels.get("istio") or name.removeprefix("istio-"))}


def _gateway(release: Any, where: str, values: Mapping[str, Any]) -> Part:
    """The gateway chart makes a budget only of a non-empty `podDisruptionBudget` (1.30.3
    templates/poddisruptionbudget.yaml); the platform declares its own (components/mesh.py, and
    components/egress_gateway.py for the chart's second release), which must select that release's own pods."""
    chart_budget = get(values, "podDisruptionBudget")
    namespace = get(release.props, "namespace", default="")
    pods = gateway_pod_labels(release.props, values)
    which = "the ingress gateway" if pods["istio"] == GATEWAY_SELECTOR.get("istio") else f"the {pods['istio']} gateway"
    return Part(
        f"{which} ({where})",
        release.urn,
        namespace,
        pods,
        *_autoscaled(values, ("autoscaling", "enabled"), ("autoscaling", "minReplicas")),
        get(values, "topologySpreadConstraints"),
        get(values, "affinity"),
        "topologySpreadConstraints",
        f"a PodDisruptionBudget in {namespace} selecting {pods}",
        [Budget("podDisruptionBudget", chart_budget, "podDisruptionBudget.maxUnavailable to 1")]
        if isinstance(chart_budget, Mapping) and chart_budget
        else [],
    )


def _coalesced(values: Mapping[str, Any], key: str, default: Any) -> Any:
    """A value as Helm merges the release's over the chart's: the chart's default when the release does not give
    it, nothing (None) when it gives null."""
    return values[key] if isinstance(values, Mapping) and key in values else default


def _kueue(release: Any, where: str, values: Mapping[str, Any]) -> Part:
    """The chart reads the manager's topologySpreadConstraints but no affinity (templates/manager/manager.yaml)."""
    manager = get(values, "controllerManager", default={}) or {}
    pdb = _coalesced(manager, "podDisruptionBudget", {})
    budgets = []
    if get(pdb, "enabled") is True:
        key = "controllerManager.podDisruptionBudget"
        budgets.append(Budget(key, {"minAvailable": _coalesced(pdb, "minAvailable", 1)}, f"{key}.minAvailable to 1"))
    return Part(
        f"Kueue's manager ({where})",
        release.urn,
        get(release.props, "namespace", default=""),
        PODS["kueue"],
        get(manager, "replicas", default=1),
        "controllerManager.replicas",
        get(manager, "topologySpreadConstraints"),
        None,
        "controllerManager.topologySpreadConstraints",
        "controllerManager.podDisruptionBudget.enabled",
        budgets,
    )


def _cluster_autoscaler(release: Any, where: str, values: Mapping[str, Any]) -> Part:
    """One leads, the others stand by (leader election is the binary's default); templates/pdb.yaml renders the
    merged `podDisruptionBudget` unless it is empty or false."""
    given = _coalesced(values, "podDisruptionBudget", AUTOSCALER_BUDGET)
    merged = {**AUTOSCALER_BUDGET, **given} if isinstance(given, Mapping) else {}
    spec = {key: value for key, value in merged.items() if value is not None}
    return Part(
        f"the cluster autoscaler ({where})",
        release.urn,
        get(release.props, "namespace", default=""),
        PODS["clusterAutoscaler"],
        get(values, "replicaCount", default=1),
        "replicaCount",
        get(values, "topologySpreadConstraints"),
        get(values, "affinity"),
        "topologySpreadConstraints",
        "podDisruptionBudget",
        [Budget("podDisruptionBudget", spec, "podDisruptionBudget.maxUnavailable to 1 (and minAvailable to null)")]
        if spec
        else [],
    )


CHARTS = {"istiod": _istiod, "gateway": _gateway, "kueue": _kueue, "cluster-autoscaler": _cluster_autoscaler}


def _knative(serving: Any) -> Iterator[Part]:
    """Each Deployment of Serving's control plane as the operator (knative/operator knative-v1.23.0) makes it of the
    KnativeServing: `spec.high-availability.replicas` unless a workload override of its name gives `replicas`
    (pkg/reconciler/common/ha.go); the overrides' topologySpreadConstraints and affinity replace the manifest's,
    `spec.deployments[]` first, then `spec.workloads[]` (workload_override.go, GetWorkloadOverrides); a
    `spec.podDisruptionBudgets[]` entry replaces both fields of the manifest's budget of its name, and fails the
    install when it sets both (poddisruptionbudget_override.go)."""
    spec = get(serving.props, "spec", default={})
    where = f"KnativeServing {namespace_of(serving.props)}/{name_of(serving.props)}"
    overrides = [(key, o) for key in ("deployments", "workloads") for o in (get(spec, key, default=[]) or [])]
    budget_overrides = {get(o, "name"): o for o in get(spec, "podDisruptionBudgets", default=[]) or []}
    for name, deployment in KNATIVE["deployments"].items():
        replicas: Any = get(spec, "high-availability", "replicas", default=1)
        replicas_key = "spec.high-availability.replicas"
        constraints = affinity = None
        for key, override in overrides:
            if get(override, "name") != name:
                continue
            if get(override, "replicas") is not None:
                replicas, replicas_key = get(override, "replicas"), f"spec.{key}[name={name}].replicas"
            constraints = get(override, "topologySpreadConstraints") or constraints
            affinity = affinity if get(override, "affinity") is None else get(override, "affinity")
        budgets = []
        bundled = deployment["bundledBudget"]
        if bundled is not None:
            override = budget_overrides.get(bundled, {})
            fields = {k: get(override, k) for k in ("minAvailable", "maxUnavailable") if get(override, k) is not None}
            refused = "the operator refuses both minAvailable and maxUnavailable" if len(fields) == 2 else None
            key = f"spec.podDisruptionBudgets[name={bundled}]"
            budgets.append(Budget(key, fields or KNATIVE["bundledBudgetSpec"], f"{key}.maxUnavailable to 1", refused))
        yield Part(
            f"Knative's {name} ({where})",
            serving.urn,
            KNATIVE["namespace"],
            deployment["pods"],
            replicas,
            replicas_key,
            constraints,
            affinity,
            f"spec.workloads[name={name}].topologySpreadConstraints",
            f"a PodDisruptionBudget in {KNATIVE['namespace']} selecting {deployment['pods']}",
            budgets,
        )


def control_plane_parts(args: Any) -> Iterator[Part]:
    """Every part of what every request depends on that the stack declares."""
    for release in of_type(args, HELM_RELEASE):
        chart, where, values = _release(release)
        if chart in CHARTS:
            yield CHARTS[chart](release, where, values)
    for serving in of_type(args, KNATIVE_SERVING_CR):
        yield from _knative(serving)
    for picker in endpoint_pickers(args):
        pod = get(picker.resource.props, "spec", "template", "spec", default={})
        yield Part(
            picker.label,
            picker.resource.urn,
            picker.namespace,
            picker.pod_labels,
            get(picker.resource.props, "spec", "replicas", default=1),
            "spec.replicas",
            get(pod, "topologySpreadConstraints"),
            get(pod, "affinity"),
            "spec.template.spec.topologySpreadConstraints",
            f"a PodDisruptionBudget in {picker.namespace} selecting its pod labels",
            picker=True,
        )
