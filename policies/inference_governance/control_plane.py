"""Control-plane availability: in production what every request depends on runs enough replicas, spread over nodes
and kept through a drain."""

from __future__ import annotations

from typing import Any, Mapping

from .kube import (
    FLOORS,
    HELM_RELEASE,
    PDB,
    Report,
    config,
    get,
    is_production,
    name_of,
    namespace_of,
    selector_matches,
    whole_number,
)
from .workloads import of_type

KNATIVE_SERVING_CR = "kubernetes:operator.knative.dev/v1beta1:KnativeServing"


def _replicas_of(values: Mapping[str, Any], enabled: tuple[str, ...], minimum: tuple[str, ...]) -> Any:
    """A chart's replica floor from its values: the autoscaler's minimum unless it is turned off,
    then the fixed count (`replicaCount`); the chart's default (1) where neither is given."""
    if get(values, *enabled, default=True) is not False:
        return get(values, *minimum, default=1)
    return get(values, "replicaCount", default=1)


def _budgeted(args: Any, namespace: str, labels: Mapping[str, str]) -> bool:
    """Whether a PodDisruptionBudget of `namespace` selects pods labelled `labels`."""
    return any(
        namespace_of(pdb.props) == namespace and selector_matches(get(pdb.props, "spec", "selector"), dict(labels))
        for pdb in of_type(args, PDB)
    )


def _gateway_pod_labels(release: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, str]:
    """The labels a gateway chart's release selects its pods by: `app` its `labels.app` or its name, `istio` its
    `labels.istio` or its name less "istio-" (istio 1.30.3 manifests/charts/gateway/templates/_helpers.tpl
    "gateway.name", "gateway.selectorLabels"): an ingress or an egress gateway alike."""
    name = str(get(values, "name", default="") or get(release, "name", default="") or "istio-ingressgateway")
    labels = get(values, "labels", default={}) or {}
    return {"app": str(labels.get("app") or name), "istio": str(labels.get("istio") or name.removeprefix("istio-"))}


def control_plane_availability(args: Any, report_violation: Report) -> None:
    """In production every request depends on istiod (certificates, configuration), the ingress
    gateway (and every model server's start on the egress gateway, the same chart), Knative Serving's
    control plane (activator, autoscaler, controller, webhook) and Kueue's manager (its webhook admits
    every batch Job), and the cluster autoscaler (the nodes of a peak): each runs at least
    minReplicasInProduction replicas, spread over nodes, each gateway behind a PodDisruptionBudget (istiod's and Kueue's
    charts make theirs; Knative's activator and webhook come with theirs and with pod
    anti-affinity, knative/serving knative-v1.23.0 config/core/deployments), so one crash, node loss
    or drain takes none of it away. Read where the program sets them:
    the istiod chart's `autoscaleMin` (istio 1.30.3), the gateway chart's
    `autoscaling.minReplicas`, Kueue's `controllerManager.replicas` with its PodDisruptionBudget
    enabled (kueue 0.19.2), the cluster autoscaler chart's `replicaCount`, and KnativeServing's
    `spec.high-availability.replicas` (knative/operator knative-v1.23.0)."""
    if not is_production(args):
        return
    floor = int(config(args).get("minReplicasInProduction", FLOORS["minControlPlaneReplicasInProduction"]))
    for release in of_type(args, HELM_RELEASE):
        chart = str(get(release.props, "chart", default="")).rsplit("/", 1)[-1]
        values = get(release.props, "values", default={}) or {}
        where = f"Helm release {get(release.props, 'namespace', default='?')}/{get(release.props, 'name', default='?')} ({chart})"
        if chart == "istiod":
            replicas = _replicas_of(values, ("autoscaleEnabled",), ("autoscaleMin",))
            key = "autoscaleMin"
            placement: tuple[str, ...] = ()
        elif chart == "gateway":
            replicas = _replicas_of(values, ("autoscaling", "enabled"), ("autoscaling", "minReplicas"))
            key = "autoscaling.minReplicas"
            placement = ()
            if not _budgeted(args, get(release.props, "namespace", default=""), _gateway_pod_labels(release.props, values)):
                report_violation(
                    f"{where}: no PodDisruptionBudget selects the gateway's pods, so a drain may take every replica",
                    release.urn,
                )
        elif chart == "kueue":
            replicas = get(values, "controllerManager", "replicas", default=1)
            key = "controllerManager.replicas"
            placement = ("controllerManager",)
            if get(values, "controllerManager", "podDisruptionBudget", "enabled") is not True:
                report_violation(
                    f"{where}: no PodDisruptionBudget for Kueue's manager, so a drain may take every replica: set "
                    "controllerManager.podDisruptionBudget.enabled",
                    release.urn,
                )
        elif chart == "cluster-autoscaler":
            # One leads, the others stand by (leader election is the binary's default); the chart's
            # default PodDisruptionBudget keeps one through a drain.
            replicas = get(values, "replicaCount", default=1)
            key = "replicaCount"
            placement = ()
        else:
            continue
        spread = get(values, *placement, default={}) or {}
        if not get(spread, "topologySpreadConstraints") and not get(spread, "affinity", "podAntiAffinity"):
            report_violation(
                f"{where}: its replicas may share a node (no topologySpreadConstraints or podAntiAffinity at "
                f"{'.'.join((*placement, 'topologySpreadConstraints')) or 'topologySpreadConstraints'}): one node "
                "lost takes all of it",
                release.urn,
            )
        count = whole_number(replicas)
        if (count or 0) < floor:
            shown = count if count is not None else repr(replicas)
            report_violation(
                f"{where} runs {shown} replica(s) at least; production keeps at least {floor} of what every request "
                f"depends on: set {key} to {floor} or more",
                release.urn,
            )
    for serving in of_type(args, KNATIVE_SERVING_CR):
        replicas = get(serving.props, "spec", "high-availability", "replicas", default=1)
        if (whole_number(replicas) or 0) < floor:
            replicas = whole_number(replicas) if whole_number(replicas) is not None else replicas
            report_violation(
                f"KnativeServing {namespace_of(serving.props)}/{name_of(serving.props)} runs its control plane (activator, "
                f"autoscaler, controller, webhook) at {replicas!r} replica(s); production keeps at least {floor}: set "
                f"spec.high-availability.replicas to {floor} or more",
                serving.urn,
            )
