"""Scheduling onto the pools: the pool a pod's node selector names (or, without one, the first whose taints it
tolerates), and every pod at peak bin-packed onto the pool's nodes at maxSize."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from platform_config.quantity import parse_quantity, show_rounded

from .workloads import EXTENDED_PREFIXES, Workload


@dataclass(frozen=True)
class PoolTemplate:
    name: str
    labels: dict[str, str]
    taints: list[dict[str, str]]
    allocatable: dict[str, Decimal]
    max_size: int

    @staticmethod
    def from_output(data: dict[str, Any]) -> PoolTemplate:
        return PoolTemplate(
            name=data["name"],
            labels=dict(data["labels"]),
            taints=list(data["taints"]),
            allocatable={k: parse_quantity(str(v)) for k, v in data["allocatable"].items()},
            max_size=int(data["maxSize"]),
        )


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") not in (None, "", taint.get("effect")):
            continue
        if toleration.get("operator") == "Exists" and toleration.get("key") in (None, "", taint.get("key")):
            return True
        if toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def _untolerated(pool: PoolTemplate, tolerations: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The pool's taints that keep this pod off its nodes."""
    return [t for t in pool.taints if t.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(tolerations, t)]


def _asks_for_extended_resources(workload: Workload) -> bool:
    return any(
        resource.startswith(EXTENDED_PREFIXES)
        for container in workload.containers + workload.init_containers
        for kind in ("requests", "limits")
        for resource in ((container.get("resources") or {}).get(kind) or {})
    )


def pool_for(workload: Workload, pools: list[PoolTemplate]) -> PoolTemplate | None:
    selector = workload.pod.get("nodeSelector") or {}
    tolerations = workload.pod.get("tolerations") or []
    if not selector:
        if _asks_for_extended_resources(workload):
            workload.findings.append("no nodeSelector: a model server names the pool it runs on")
            return None
        # The scheduler may put it on any node whose taints it tolerates.
        open_to_it = [p for p in pools if not _untolerated(p, tolerations)]
        if not open_to_it:
            workload.left_to_cluster_scheduler = True
            return None
        return open_to_it[0]
    matching = [p for p in pools if all(p.labels.get(k) == v for k, v in selector.items())]
    if not matching:
        workload.findings.append(f"no node pool has the labels of its nodeSelector {selector}")
        return None
    pool = matching[0]
    for taint in _untolerated(pool, tolerations):
        workload.findings.append(
            f"does not tolerate pool {pool.name}'s taint {taint['key']}={taint.get('value', '')}:{taint['effect']}"
        )
    return pool


def _fits(node: dict[str, Decimal], need: dict[str, Decimal]) -> bool:
    return all(node.get(r, Decimal(0)) >= amount for r, amount in need.items() if amount)


def _take(node: dict[str, Decimal], need: dict[str, Decimal]) -> None:
    for r, amount in need.items():
        node[r] = node.get(r, Decimal(0)) - amount


def bin_pack(pool: PoolTemplate, members: list[Workload]) -> list[str]:
    """First-fit decreasing of every pod at peak onto the pool's nodes at maxSize.

    What first fit onto maxSize identical nodes gives, at a cost that grows with the pods, not the nodes: every node
    starts alike, DaemonSet pods included (each comes with every node, before any other pod: placed on the node
    template once), and a node is opened only when a pod fits on none opened before it; pods asking alike keep a
    cursor at the first opened node that may still take one (a node that turned such a pod away only fills up)."""
    # Each workload's pod requests once, shared by all its pods at peak.
    requests_of = [w.pod_requests() for w in members]
    template = dict(pool.allocatable)
    for workload, requests in zip(members, requests_of, strict=True):
        need = {**requests, "pods": Decimal(1)}
        if workload.daemon and _fits(template, need):
            _take(template, need)
            workload.placed += pool.max_size
    pods = [(w, requests) for w, requests in zip(members, requests_of, strict=True) if not w.daemon for _ in range(w.peak)]
    gpu_first = sorted(
        pods, key=lambda p: (-sum(v for k, v in p[1].items() if k.startswith(EXTENDED_PREFIXES)), -p[1].get("cpu", 0))
    )
    nodes: list[dict[str, Decimal]] = []
    cursors: dict[tuple[tuple[str, Decimal], ...], int] = {}
    for workload, requests in gpu_first:
        need = {**requests, "pods": Decimal(1)}
        shape = tuple(sorted(need.items()))
        index = next((i for i in range(cursors.get(shape, 0), len(nodes)) if _fits(nodes[i], need)), None)
        if index is None and len(nodes) < pool.max_size and _fits(template, need):
            nodes.append(dict(template))
            index = len(nodes) - 1
        cursors[shape] = len(nodes) if index is None else index
        if index is not None:
            _take(nodes[index], need)
            workload.placed += 1
    # The nodes as first fit leaves them: those opened, and the rest as the template.
    unopened = [template] if len(nodes) < pool.max_size else []
    return [
        unplaced_finding(pool, workload, requests, nodes + unopened)
        for workload, requests in zip(members, requests_of, strict=True)
        if workload.placed < workload.peak
    ]


def unplaced_finding(
    pool: PoolTemplate, workload: Workload, requests: dict[str, Decimal], nodes: list[dict[str, Decimal]]
) -> str:
    """What the stage says of a workload whose pods at peak do not all fit the pool: how many, what each needs, and
    which resource no node (as the packing left them) has enough of."""
    short = [r for r, amount in requests.items() if amount and amount > max(node.get(r, Decimal(0)) for node in nodes)]
    needs = ", ".join(f"{r} {show_rounded(r, a)}" for r, a in sorted(requests.items()))
    return (
        f"{workload.label}: {workload.peak - workload.placed} of its {workload.peak} pods at peak do not fit pool "
        f"{pool.name} at maxSize {pool.max_size} (each needs {needs}; "
        f"short of {', '.join(short) or 'room on any single node'})"
    )
