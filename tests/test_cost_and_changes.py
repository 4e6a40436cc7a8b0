"""The cost the program exports (components/plan_reports.py cost_report) and what the preview's diff says a change
does (preview/diff.py): replaced or updated in place as pulumi-kubernetes decides, and whose pods roll."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest

from preview.diff import diff_resources, replacing_paths

from .helpers import raw_stack, validate


def _cost(raw):
    from components.plan_reports import cost_report

    return cost_report(validate(raw))


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_the_tenants_the_platform_and_what_none_holds_add_up_to_the_environment(stack):
    cost = _cost(copy.deepcopy(raw_stack(stack)))
    for scale in ("min", "max"):
        parts = [Decimal(t[f"{scale}PerHour"]) for t in cost["tenants"]]
        parts += [Decimal(cost["platform"][f"{scale}PerHour"]), Decimal(cost["unallocated"][f"{scale}PerHour"])]
        assert sum(parts) == Decimal(cost["environment"][f"{scale}PerHour"])
        assert Decimal(cost["unallocated"][f"{scale}PerHour"]) >= 0
    if stack == "dev":
        # An existing cluster reached by kubeconfig: no region to price its node in, and no system node group.
        assert cost["unpriced"] == [
            {"pool": "l4-shared", "reason": "no AWS region (a cluster reached by kubeconfig) and no pricePerHour"}
        ]
        assert cost["environment"] == {"minPerHour": "0.00", "maxPerHour": "0.00"}
    else:
        assert cost["unpriced"] == [] and Decimal(cost["platform"]["minPerHour"]) > 0
        assert "2026-07-06" in cost["priceList"]


def test_more_than_a_pools_nodes_hold_is_charged_as_the_nodes_there_are():
    """The servers' maxReplicas and the batch shards on one pool together asking for more than its maxSize holds
    (they cannot all run at once): each tenant is charged its part of the pool's nodes, so none is counted twice and
    what no tenant holds never goes below zero."""
    import dataclasses

    from components.plan_reports import cost_report

    plan = validate(copy.deepcopy(raw_stack("prod")))
    # The serving tenant's server on l4-batch at 60 replicas of one L4 (15 nodes' worth) on a pool of 4 g6.12xlarge,
    # beside team-b's running batch job (2 shards of one L4: half a node).
    models = tuple(
        dataclasses.replace(
            m, servers=tuple(dataclasses.replace(s, max_replicas=60) if s.pool.name == "l4-batch" else s for s in m.servers)
        )
        for m in plan.models
    )
    cost: Any = cost_report(dataclasses.replace(plan, models=models))
    pool = next(p for p in cost["pools"] if p["pool"] == "l4-batch")
    tenants = {t["tenant"]: Decimal(t["maxPerHour"]) for t in cost["tenants"]}
    assert Decimal(cost["unallocated"]["maxPerHour"]) >= 0
    # team-b's half node is 0.5 of the 15.5 nodes asked for, of the 4 there are, at 2.30 a node (prod's pricePerHour).
    per_node = Decimal(pool["pricePerHour"])
    assert tenants["team-b"] == (Decimal("0.5") / Decimal("15.5") * 4 * per_node).quantize(Decimal("0.01"))
    assert sum(tenants.values()) + Decimal(cost["platform"]["maxPerHour"]) + Decimal(
        cost["unallocated"]["maxPerHour"]
    ) == Decimal(cost["environment"]["maxPerHour"])


def test_shares_rounded_alone_would_show_more_than_the_environment_so_the_cents_are_apportioned():
    from components.plan_reports import apportioned

    # Each rounded alone: 0.34 + 0.34 + 0.33 = 1.01 of 1.00, and what no tenant holds -0.01.
    parts = {"a": Decimal("0.335"), "b": Decimal("0.335"), "c": Decimal("0.33"), "": Decimal(0)}
    shown = apportioned(Decimal("1.00"), parts)
    assert sum(shown.values()) == Decimal("1.00") and all(v >= 0 for v in shown.values())
    assert sorted(shown.values()) == [Decimal(0), Decimal("0.33"), Decimal("0.33"), Decimal("0.34")]


def test_a_tenant_is_charged_the_gpus_its_pods_hold_and_a_pool_without_a_price_nothing():
    raw = copy.deepcopy(raw_stack("prod"))
    cost = _cost(raw)
    tenants = {t["tenant"]: t for t in cost["tenants"]}
    # team-a's 1B runs on one 1g.10gb MIG slice per replica: 1/7 of one of a p5.48xlarge's 8 GPUs, at 55.04 an hour,
    # 2 replicas at least and 6 at most.
    assert (tenants["team-a"]["minPerHour"], tenants["team-a"]["maxPerHour"]) == ("1.97", "5.90")
    # team-b runs batch jobs only: nothing at min scale; at most the running job's 2 parallel shards, each one of a
    # node's 4 L4s at 2.30 (the paused one holds nothing).
    assert (tenants["team-b"]["minPerHour"], tenants["team-b"]["maxPerHour"]) == ("0.00", "1.15")
    # Minimum nodes are whole pods on each node's geometry: 3 replicas of the 70B at 4 whole GPUs each need 3 p5 nodes,
    # whose serving mix offers 4 whole GPUs a node (12 GPUs' worth of a sum of shares would round to 2).
    seventy = next(m for m in raw["models"] if m["name"] == "llama-70b")
    seventy["autoscaling"]["minReplicas"] = 3
    h100 = next(p for p in _cost(raw)["pools"] if p["pool"] == "h100")
    assert h100["nodes"]["min"] == 3
    seventy["autoscaling"]["minReplicas"] = 2
    # Without the stack's rates, the list prices of us-east-1: the same 55.04 for a p5.48xlarge, 4.6016 (on demand,
    # a ceiling for the spot pool) for a g6.12xlarge, whose half node for team-b's shards is 2.3008.
    for pool in raw["nodePools"]:
        pool.pop("pricePerHour", None)
    listed = _cost(raw)
    rows = {row["pool"]: row for row in listed["pools"]}
    assert (rows["h100"]["pricePerHour"], rows["h100"]["priceSource"], rows["h100"]["priceNote"]) == ("55.04", "list", None)
    assert (rows["l4-batch"]["pricePerHour"], rows["l4-batch"]["priceNote"]) == (
        "4.6016",
        "spot billed at most the on-demand list price",
    )
    assert rows["system node group"]["instanceType"] == raw["cluster"]["eks"]["systemNodeGroup"]["instanceType"]
    assert {t["tenant"]: t["maxPerHour"] for t in listed["tenants"]}["team-b"] == "2.30"
    # In a region the list does not cover, nothing is priced, and each pool says why.
    raw["cluster"]["eks"]["region"] = "eu-west-1"
    unpriced = _cost(raw)
    assert unpriced["environment"] == {"minPerHour": "0.00", "maxPerHour": "0.00"}
    assert {u["pool"] for u in unpriced["unpriced"]} == {p["name"] for p in raw["nodePools"]} | {"system node group"}
    assert all("us-east-1, the cluster is in eu-west-1; set pricePerHour" in u["reason"] for u in unpriced["unpriced"])


def _resource(kind: str, name: str, inputs: dict) -> dict:
    return {"urn": f"urn:pulumi:prod::p::{kind}::{name}", "type": kind, "name": name, "inputs": inputs}


@pytest.mark.parametrize(
    ("kind", "before", "after", "replaced", "rolls"),
    [
        ("kubernetes:apps/v1:Deployment", {"spec": {"template": {"spec": {"image": "a"}}}},
         {"spec": {"template": {"spec": {"image": "b"}}}}, [], True),
        ("kubernetes:apps/v1:Deployment", {"spec": {"selector": {"matchLabels": {"a": "1"}}}},
         {"spec": {"selector": {"matchLabels": {"a": "2"}}}}, ["spec.selector.matchLabels.a"], False),
        ("kubernetes:batch/v1:Job", {"spec": {"template": {"spec": {"image": "a"}}}},
         {"spec": {"template": {"spec": {"image": "b"}}}}, ["spec.template.spec.image"], False),
        ("kubernetes:core/v1:ConfigMap", {"data": {"k": "a"}}, {"data": {"k": "b"}}, ["data.k"], False),
        ("kubernetes:core/v1:Service", {"spec": {"ports": [{"port": 1}]}}, {"spec": {"ports": [{"port": 2}]}}, [], False),
        ("kubernetes:core/v1:Service", {"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}, ["metadata.name"], False),
        ("kubernetes:helm.sh/v3:Release", {"values": {"a": 1}}, {"values": {"a": 2}}, [], False),
        ("kubernetes:helm.sh/v3:Release", {"namespace": "a"}, {"namespace": "b"}, ["namespace"], False),
        ("kubernetes:serving.knative.dev/v1:Service", {"spec": {"template": {"metadata": {"a": "1"}}}},
         {"spec": {"template": {"metadata": {"a": "2"}}}}, [], True),
        ("aws:iam/role:Role", {"name": "a"}, {"name": "b"}, [], False),
    ],
)  # fmt: skip
def test_a_change_is_an_update_or_a_replacement_as_pulumi_kubernetes_decides(kind, before, after, replaced, rolls):
    diff = diff_resources([_resource(kind, "x", before)], [_resource(kind, "x", after)])
    (change,) = diff.changed
    assert change.replacing == replaced and change.rolls_pods is rolls
    ((path, old, new),) = change.values
    assert path == change.paths[0] and old != new


def test_the_replacing_paths_are_those_under_a_kinds_force_new_inputs():
    assert replacing_paths("kubernetes:apps/v1:StatefulSet", ["spec.volumeClaimTemplates[0].spec", "spec.replicas"]) == [
        "spec.volumeClaimTemplates[0].spec"
    ]
    assert replacing_paths("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding", ["roleRef.name", "subjects[0]"]) == [
        "roleRef.name"
    ]
    # A prefix of a word is not the word: `spec.selectorX` is not under `spec.selector`.
    assert replacing_paths("kubernetes:apps/v1:Deployment", ["spec.selectorX"]) == []
