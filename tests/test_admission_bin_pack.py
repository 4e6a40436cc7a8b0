"""The scheduling stage's bin packing (preview/admission/scheduling.py bin_pack) gives what first fit over every node
of the pool at maxSize gives, placement for placement and finding for finding, while its work grows with the pods:
held against that plain first fit (the stage's earlier form, kept here as the reference) on pools of random shapes."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from preview.admission.scheduling import PoolTemplate, bin_pack, unplaced_finding
from preview.admission.workloads import EXTENDED_PREFIXES, Workload

GPU = "nvidia.com/gpu"


def _reference(pool: PoolTemplate, members: list[Workload]) -> list[str]:
    """First-fit decreasing onto maxSize nodes, every DaemonSet pod on every node first."""
    nodes = [dict(pool.allocatable) for _ in range(pool.max_size)]
    requests_of = [w.pod_requests() for w in members]

    def place(workload: Workload, requests: dict[str, Decimal], node: dict[str, Decimal]) -> bool:
        need = {**requests, "pods": Decimal(1)}
        if not all(node.get(r, Decimal(0)) >= amount for r, amount in need.items() if amount):
            return False
        for r, amount in need.items():
            node[r] = node.get(r, Decimal(0)) - amount
        workload.placed += 1
        return True

    for workload, requests in zip(members, requests_of):
        if workload.daemon:
            for node in nodes:
                place(workload, requests, node)
    pods = [(w, r) for w, r in zip(members, requests_of) if not w.daemon for _ in range(w.peak)]
    for workload, requests in sorted(
        pods, key=lambda p: (-sum(v for k, v in p[1].items() if k.startswith(EXTENDED_PREFIXES)), -p[1].get("cpu", 0))
    ):
        any(place(workload, requests, node) for node in nodes)
    return [
        unplaced_finding(pool, workload, requests, nodes)
        for workload, requests in zip(members, requests_of)
        if workload.placed < workload.peak
    ]


def _workloads(rng: random.Random, count: int, max_size: int) -> list[Workload]:
    out = []
    for index in range(count):
        daemon = rng.random() < 0.15
        requests = {"cpu": f"{rng.choice([100, 250, 500, 2000, 7000])}m", "memory": f"{rng.choice([1, 4, 16, 60])}Gi"}
        if not daemon and rng.random() < 0.5:
            requests[GPU] = str(rng.choice([1, 2, 4, 8]))
        pod = {"containers": [{"name": "c", "resources": {"requests": requests}}]}
        workload = Workload("Deployment", "ns", f"w{index}", pod, {}, {}, 1, 1, 0, daemon=daemon)
        workload.containers = pod["containers"]
        workload.peak = max_size if daemon else rng.randint(0, 12)
        out.append(workload)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_bin_pack_places_as_first_fit_over_every_node(seed):
    rng = random.Random(seed)
    # maxSize is at least 1 (platform_config/models/node_pools.py).
    max_size = rng.choice([1, 3, 10, 40])
    allocatable = {"cpu": Decimal(rng.choice([8, 16, 32])), "memory": Decimal(64 * 2**30), "pods": Decimal(rng.choice([5, 110]))}
    if rng.random() < 0.8:
        allocatable[GPU] = Decimal(8)
    pool = PoolTemplate("p", {}, [], allocatable, max_size)
    ours, theirs = _workloads(random.Random(seed), 30, max_size), _workloads(random.Random(seed), 30, max_size)
    assert bin_pack(pool, ours) == _reference(pool, theirs)
    assert [w.placed for w in ours] == [w.placed for w in theirs]
    assert any(w.placed for w in ours)
