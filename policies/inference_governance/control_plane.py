"""Control-plane availability: in production what every request depends on runs enough replicas, one per node, behind
one PodDisruptionBudget that keeps a pod up through a drain and lets a drain proceed."""

from __future__ import annotations

from typing import Any

from .budgets import blocks_every_drain, leaves_none_up
from .control_plane_parts import Part, control_plane_parts, spreads_over_nodes
from .kube import FLOORS, PDB, Report, config, get, is_production, name_of, namespace_of, selector_matches, whole_number
from .workloads import of_type


def _replicas(part: Part, floor: int, report_violation: Report) -> int | None:
    count = whole_number(part.replicas)
    if (count or 0) < floor:
        shown = count if count is not None else repr(part.replicas)
        report_violation(
            f"{part.what} runs as few as {shown} replica(s); production keeps at least {floor} of what every request "
            f"depends on, or one crash or drain takes it away: set {part.replicas_key} to {floor} or more",
            part.urn,
        )
    return count


def _spread(part: Part, report_violation: Report) -> None:
    if not spreads_over_nodes(part):
        report_violation(
            f"{part.what}: its replicas may share a node, which one node lost takes all of: set {part.spread_key} "
            f"(maxSkew 1, topologyKey kubernetes.io/hostname, whenUnsatisfiable DoNotSchedule, selecting "
            f"{dict(part.pods)}) or a required podAntiAffinity by hostname",
            part.urn,
        )


def _budgets(part: Part, count: int | None, rendered: list[Any], report_violation: Report) -> None:
    """One budget selects its pods (the eviction API refuses to evict a pod two budgets select: kubernetes
    pkg/registry/core/pod/storage/eviction.go), which with two replicas or more keeps one up and lets one go."""
    # (what it is, its spec, why its installer refuses it, the object to report, what to set, whose pods)
    budgets = [(f"{part.what}: the budget its {b.key} makes", b.spec, b.refused, part.urn, b.fix, "") for b in part.budgets]
    budgets += [
        (
            f"PodDisruptionBudget {namespace_of(b.props)}/{name_of(b.props)}",
            get(b.props, "spec", default={}),
            None,
            b.urn,
            "maxUnavailable 1",
            f" of {part.what}",
        )
        for b in rendered
        if namespace_of(b.props) == part.namespace and selector_matches(get(b.props, "spec", "selector"), dict(part.pods))
    ]
    if not budgets:
        report_violation(
            f"{part.what}: no PodDisruptionBudget selects its pods, so a drain may take every replica at once: set "
            f"{part.budget_key} (maxUnavailable 1, or minAvailable 1)",
            part.urn,
        )
        return
    if len(budgets) > 1:
        each = "; ".join(what.split(": ", 1)[-1] for what, *_ in budgets)
        report_violation(
            f"{part.what}: more than one budget selects its pods ({each}), and the eviction API refuses to evict a pod "
            "two budgets select: every drain of their nodes stalls; keep one",
            part.urn,
        )
    for what, spec, refused, urn, fix, of in budgets:
        if refused is not None:
            report_violation(f"{what}: {refused}, so the install fails: set {fix}", urn)
            continue
        if (count or 0) < 2:
            continue  # one replica cannot be kept up through a drain by any budget: the floor speaks for it
        why = leaves_none_up(spec, count or 0)
        if why is not None:
            report_violation(f"{what} ({why}) lets a drain take every pod{of} at once: set {fix}", urn)
            continue
        why = blocks_every_drain(spec, count or 0)
        if why is not None:
            report_violation(f"{what} ({why}) lets no pod{of} be evicted: every node drain and upgrade stalls; set {fix}", urn)


def control_plane_availability(args: Any, report_violation: Report) -> None:
    """In production every request depends on istiod (certificates, configuration), the ingress gateway, Knative
    Serving's control plane (activator, autoscaler, controller, webhook, net-istio's controller and webhook), the
    endpoint pickers, Kueue's manager (its webhook admits every batch Job) and the cluster autoscaler (the nodes of a
    peak): each runs at least minReplicasInProduction replicas (the pickers minEndpointPickerReplicasInProduction),
    no two on one node, behind exactly one PodDisruptionBudget that keeps one up and lets one go, so one crash, node
    loss or drain takes none of it away and no drain stalls on it. Each read where the program sets it
    (control_plane_parts.py): the charts' values, the KnativeServing's spec as the operator applies it, and the
    PodDisruptionBudgets the stack declares."""
    if not is_production(args):
        return
    floors = {
        False: int(config(args).get("minReplicasInProduction", FLOORS["minControlPlaneReplicasInProduction"])),
        True: int(config(args).get("minEndpointPickerReplicasInProduction", FLOORS["minEndpointPickerReplicasInProduction"])),
    }
    rendered = of_type(args, PDB)
    for part in control_plane_parts(args):
        count = _replicas(part, floors[part.picker], report_violation)
        _spread(part, report_violation)
        _budgets(part, count, rendered, report_violation)
