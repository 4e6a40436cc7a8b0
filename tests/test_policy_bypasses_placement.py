"""The ways around the policy pack through where pods land and how many run (issue 12), each with a violating and a
compliant case, with the pack's defaults and with a policy config (tests/test_policy_bypasses.py): placement by node
affinity, premium services kept warm, the endpoint pickers' replica floor, and what every request depends on kept
highly available (replicas, spread over nodes, one budget)."""

from __future__ import annotations

from typing import Any

import pytest

from preview.engine import RecordedResource

from . import policy_helpers
from .helpers import PROJECT
from .policy_helpers import AUTOSCALER, EPP, EPP_PDB, NOTHING, analyze_stack, both, edit, stack_with, without_maximum

# The policy tests' module fixtures (tests/policy_helpers.py), bound here for pytest to find.
baseline, harness, configured_harness = policy_helpers.baseline, policy_helpers.harness, policy_helpers.configured_harness


POOL = "inference.platform/pool"


# --- placement by node affinity --------------------------------------------------------------------------


def _placed(selector: dict[str, str] | None, pools: list[str] | None):
    def change(records):
        for spec in both(next(r for r in records if r.name == "llama-1b-v1-deployment")):
            spec.pop("nodeSelector")
            if selector is not None:
                spec["nodeSelector"] = selector
            if pools is not None:
                terms = [{"matchExpressions": [{"key": POOL, "operator": "In", "values": pools}]}]
                spec["affinity"] = {
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
                }
        return records

    return change


@pytest.mark.parametrize(
    "selector, pools, verdict",
    [
        (None, ["system"], {"gpu-pod-placement"}),
        (None, None, {"gpu-pod-placement"}),
        ({POOL: "h100"}, ["l4-batch"], {"gpu-pod-placement"}),  # nothing satisfies both
        (None, ["h100"], set()),
        ({POOL: "h100"}, ["h100", "system"], set()),
        # Both GPU pools: placed, and the pool rules see the spot pool it may land on.
        (None, ["h100", "l4-batch"], {"latency-sensitive-on-spot"}),
    ],
    ids=["affinity-to-system", "no-placement", "selector-and-affinity-disjoint", "affinity-to-h100",
         "selector-narrows-affinity", "affinity-to-gpu-pools"],
)  # fmt: skip
def test_gpu_pods_land_on_gpu_pools(harness, baseline, selector, pools, verdict):
    hits = harness.analyze_stack(stack_with(baseline, _placed(selector, pools)))
    assert {d.urn.rsplit("::", 1)[-1] for d in hits} <= {"llama-1b-v1-deployment"}
    assert {d.policy for d in hits} == verdict


def test_pool_rules_follow_node_affinity(harness, baseline):
    def sliced_h100_by_affinity(records):
        records = _placed(None, ["h100"])(records)
        next(r for r in records if r.name == "h100" and r.type.endswith("GpuNodePool")).outputs["sharing"] = "timeSlicing"
        return records

    hits = harness.analyze_stack(stack_with(baseline, sliced_h100_by_affinity))
    sliced = {d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "latency-sensitive-not-time-sliced"}
    assert "llama-1b-v1-deployment" in sliced


def test_a_service_taking_premium_stays_warm(harness, baseline):
    """The batch labeller's profile would let it scale to zero (min-scale 0, which a careless change
    sets); once its route takes premium requests, through its endpoint pickers, it must keep a replica."""

    def premium_to_labeller(records):
        (service,) = [r for r in records if r.name == "batch-labeller-v1-knative-service"]
        for state in {id(s): s for s in (service.inputs, service.outputs)}.values():
            state["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] = "0"
        (vs,) = [r for r in records if r.name == "batch-labeller-route-virtual-service"]
        for route in vs.outputs["spec"]["http"]:
            for match in route.get("match", []):
                if "x-tier" in match.get("headers", {}):
                    match["headers"]["x-tier"] = {"exact": "premium"}
        return records

    assert analyze_stack(harness, baseline.records) == NOTHING
    hits = harness.analyze_stack(stack_with(baseline, premium_to_labeller))
    assert {(d.policy, d.level, d.urn.rsplit("::", 1)[-1]) for d in hits} == {
        ("latency-sensitive-min-scale", "mandatory", "batch-labeller-v1-knative-service"),
        ("latency-sensitive-on-spot", "advisory", "batch-labeller-v1-knative-service"),
    }


# --- endpoint picker replicas in production (control-plane-availability) ----------------------------------

PICKERS = {
    f"{server}-epp-deployment"
    for server in ("llama-1b-v1", "llama-70b-v1", "llama-8b-v1", "llama-8b-v2", "llama-8b-batch-v1", "batch-labeller-v1")
}


def _pickers_run(replicas: int):
    def change(records):
        for record in records:
            if record.name in PICKERS:
                record.outputs["spec"]["replicas"] = replicas
        return records

    return change


@pytest.mark.parametrize(
    "replicas, defaults, moved",
    [(1, PICKERS, PICKERS), (2, set(), PICKERS), (3, set(), set())],
    ids=["one", "two", "three"],
)
def test_endpoint_picker_replica_floor_moves_with_the_config(harness, configured_harness, baseline, replicas, defaults, moved):
    # The pack's default is the program's floor (2); its config may ask for more (here 3).
    records = stack_with(baseline, _pickers_run(replicas))
    for running, flagged in ((harness, defaults), (configured_harness, moved)):
        hits = [d for d in running.analyze_stack(records) if d.policy == "control-plane-availability"]
        assert {d.urn.rsplit("::", 1)[-1] for d in hits} == flagged
        assert all(d.level == "mandatory" for d in hits)


# --- what every request depends on: replicas, spread over nodes, one budget (control-plane-availability) ---

SERVING = "knative-serving-serving"
ISTIOD, GATEWAY, KUEUE = "mesh-istiod", "mesh-gateway", "kueue-release"
GATEWAY_PDB = "mesh-gateway-pdb"
EGRESS_GATEWAY, EGRESS_GATEWAY_PDB = "egress-gateway-release", "egress-gateway-pdb"
HOSTNAME = "kubernetes.io/hostname"


def values(change):
    return lambda release: change(release["values"])


def manager(change):
    return lambda release: change(release["values"]["controllerManager"])


def workload(name: str, change):
    """Change the KnativeServing's workload override of `name`."""
    return lambda serving: change(next(w for w in serving["spec"]["workloads"] if w["name"] == name))


def first_spread(change):
    """Change the first topologySpreadConstraint of the values (or override) given."""
    return lambda holder: change(holder["topologySpreadConstraints"][0])


def without(name: str):
    return lambda records: [r for r in records if r.name != name]


def with_budget(name: str, namespace: str, selector: dict[str, str], **spec: Any):
    """A PodDisruptionBudget the stack declares beside the others."""

    def change(records):
        outputs = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {**spec, "selector": {"matchLabels": selector}},
        }
        urn = f"urn:pulumi:prod::{PROJECT}::kubernetes:policy/v1:PodDisruptionBudget::{name}"
        return [
            *records,
            RecordedResource("kubernetes:policy/v1:PodDisruptionBudget", name, urn, None, True, None, outputs, outputs),
        ]

    return change


REQUIRED_ANTI_AFFINITY = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {"app": "istiod"}}}
        ]
    }
}
PREFERRED_ANTI_AFFINITY = {
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {"app": "istiod"}}}}
        ]
    }
}


@pytest.mark.parametrize(
    "change, flagged, names",
    [
        # istiod: autoscaleMin, topologySpreadConstraints, the chart's budget (global.defaultPodDisruptionBudget, pdb).
        (edit(ISTIOD, values(lambda v: v.update(autoscaleMin=1))), ISTIOD, "set autoscaleMin to 2"),
        (edit(ISTIOD, values(lambda v: v.update(autoscaleEnabled=False))), ISTIOD, "set replicaCount to 2"),  # replicaCount 1
        (edit(ISTIOD, values(lambda v: v.update(autoscaleEnabled=False, replicaCount=3))), None, None),
        (edit(ISTIOD, values(lambda v: v.pop("topologySpreadConstraints"))), ISTIOD, "set topologySpreadConstraints"),
        (edit(ISTIOD, values(first_spread(lambda c: c.update(whenUnsatisfiable="ScheduleAnyway")))), ISTIOD, "share a node"),
        (edit(ISTIOD, values(first_spread(lambda c: c.update(topologyKey="topology.kubernetes.io/zone")))), ISTIOD, "share"),
        (edit(ISTIOD, values(first_spread(lambda c: c.update(maxSkew=2)))), ISTIOD, "maxSkew 1"),
        (edit(ISTIOD, values(first_spread(lambda c: c.update(labelSelector={"matchLabels": {"app": "other"}})))), ISTIOD,
         "selecting {'app': 'istiod'}"),
        (edit(ISTIOD, values(lambda v: (v.pop("topologySpreadConstraints"), v.update(affinity=REQUIRED_ANTI_AFFINITY)))),
         None, None),
        (edit(ISTIOD, values(lambda v: (v.pop("topologySpreadConstraints"), v.update(affinity=PREFERRED_ANTI_AFFINITY)))),
         ISTIOD, "share a node"),
        (edit(ISTIOD, values(lambda v: v.update({"global": {**v["global"], "defaultPodDisruptionBudget": {"enabled": False}}}))),
         ISTIOD, "set global.defaultPodDisruptionBudget.enabled"),
        (edit(ISTIOD, values(lambda v: v.update(pdb={"minAvailable": 0}))), ISTIOD, "the budget its pdb makes (neither"),
        (edit(ISTIOD, values(lambda v: v.update(pdb={"maxUnavailable": 2}))), ISTIOD, "maxUnavailable 2 of 2"),
        (edit(ISTIOD, values(lambda v: v.update(pdb={"minAvailable": 2}))), ISTIOD,
         "its pdb makes (minAvailable 2 with as few as 2 replicas) lets no pod be evicted"),
        (edit(ISTIOD, values(lambda v: v.update(pdb={"maxUnavailable": 1}))), None, None),
        (with_budget("istiod-extra", "istio-system", {"app": "istiod"}, maxUnavailable=1), ISTIOD, "more than one budget"),
        # The ingress gateway: autoscaling.minReplicas, topologySpreadConstraints, the stack's budget.
        (edit(GATEWAY, values(lambda v: v["autoscaling"].update(minReplicas=1))), GATEWAY, "set autoscaling.minReplicas"),
        (edit(GATEWAY, values(lambda v: v.pop("topologySpreadConstraints"))), GATEWAY, "share a node"),
        (without(GATEWAY_PDB), GATEWAY, "no PodDisruptionBudget selects its pods"),
        (edit(GATEWAY_PDB, lambda b: b["spec"]["selector"].update(matchLabels={"istio": "egress"})), GATEWAY,
         "a PodDisruptionBudget in istio-system"),
        (edit(GATEWAY_PDB, lambda b: b["spec"].update(minAvailable=2)), GATEWAY_PDB, "lets no pod of the ingress gateway"),
        # The chart's own budget beside the stack's: two budgets, so no gateway pod can be evicted.
        (edit(GATEWAY, values(lambda v: v.update(podDisruptionBudget={"minAvailable": 1}))), GATEWAY, "more than one budget"),
        # The egress gateway, the gateway chart's second release: held alike, its budget selecting its own pods.
        (edit(EGRESS_GATEWAY, values(lambda v: v["autoscaling"].update(minReplicas=1))), EGRESS_GATEWAY, "the egressgateway"),
        (edit(EGRESS_GATEWAY, values(lambda v: v.pop("topologySpreadConstraints"))), EGRESS_GATEWAY, "share a node"),
        (without(EGRESS_GATEWAY_PDB), EGRESS_GATEWAY, "no PodDisruptionBudget selects its pods"),
        (edit(EGRESS_GATEWAY_PDB, lambda b: b["spec"]["selector"].update(matchLabels={"istio": "ingressgateway"})),
         EGRESS_GATEWAY, "a PodDisruptionBudget in istio-egress"),
        # Knative Serving: spec.high-availability.replicas or a workload's, spec.workloads[].topologySpreadConstraints,
        # spec.podDisruptionBudgets[] for activator-pdb and webhook-pdb, the stack's budgets for the others.
        (edit(SERVING, lambda r: r["spec"].pop("high-availability")), SERVING, "set spec.high-availability.replicas"),
        (edit(SERVING, lambda r: r["spec"].update({"high-availability": {"replicas": 3}})), None, None),
        (edit(SERVING, workload("controller", lambda w: w.update(replicas=1))), SERVING,
         "Knative's controller (KnativeServing knative-serving/knative-serving) runs as few as 1 replica(s)"),
        (edit(SERVING, lambda r: r["spec"].update(deployments=[{"name": "webhook", "replicas": 1}])), SERVING,
         "set spec.deployments[name=webhook].replicas"),
        (edit(SERVING, lambda r: r["spec"].pop("workloads")), SERVING,
         "set spec.workloads[name=activator].topologySpreadConstraints"),
        (edit(SERVING, workload("net-istio-webhook", first_spread(lambda c: c.update(whenUnsatisfiable="ScheduleAnyway")))),
         SERVING, "set spec.workloads[name=net-istio-webhook].topologySpreadConstraints"),
        (edit(SERVING, workload("autoscaler", lambda w: (w.pop("topologySpreadConstraints"), w.update(affinity={
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {"app": "autoscaler"}}}]}})))), None, None),
        # Without the override the manifests' 80% lets none of two activators or webhooks go.
        (edit(SERVING, lambda r: r["spec"].pop("podDisruptionBudgets")), SERVING, "minAvailable 80% with as few as 2 replicas"),
        (edit(SERVING, lambda r: r["spec"]["podDisruptionBudgets"][0].update(minAvailable=1)), SERVING,
         "the operator refuses both"),
        (edit(SERVING, lambda r: r["spec"]["podDisruptionBudgets"][1].update(maxUnavailable="100%")), SERVING,
         "the budget its spec.podDisruptionBudgets[name=webhook-pdb] makes (maxUnavailable 100% of 2 replicas)"),
        (without("knative-serving-controller-pdb"), SERVING,
         "Knative's controller (KnativeServing knative-serving/knative-serving): no PodDisruptionBudget"),
        (without("knative-serving-net-istio-webhook-pdb"), SERVING,
         "a PodDisruptionBudget in knative-serving selecting {'app': 'net-istio-webhook'}"),
        (edit("knative-serving-autoscaler-pdb", lambda b: b["spec"].update(maxUnavailable=0)),
         "knative-serving-autoscaler-pdb", "lets no pod of Knative's autoscaler"),
        (with_budget("activator-extra", "knative-serving", {"app": "activator"}, maxUnavailable=1), SERVING,
         "more than one budget"),
        # The endpoint pickers: spec.replicas, their pods' topologySpreadConstraints, the stack's budgets.
        (edit(EPP, lambda d: d["spec"].update(replicas=1)), EPP, "set spec.replicas to 2"),
        (edit(EPP, lambda d: d["spec"]["template"]["spec"].pop("topologySpreadConstraints")), EPP,
         "set spec.template.spec.topologySpreadConstraints"),
        # Left by zone only.
        (edit(EPP, lambda d: d["spec"]["template"]["spec"]["topologySpreadConstraints"].pop(0)), EPP, "share a node"),
        (without(EPP_PDB), EPP, "no PodDisruptionBudget selects its pods"),
        (edit(EPP_PDB, lambda b: b["spec"]["selector"].update(matchExpressions=[
            {"key": "llm-d-router-gateway", "operator": "NotIn", "values": ["llama-1b-v1-epp"]}])), EPP,
         "no PodDisruptionBudget"),
        (edit(EPP_PDB, lambda b: b["spec"].update(maxUnavailable="100%")), EPP_PDB, "maxUnavailable 100% of 2 replicas"),
        (edit(EPP_PDB, without_maximum(minAvailable=0)), EPP_PDB, "minAvailable 0"),
        (edit(EPP_PDB, without_maximum()), EPP_PDB, "neither minAvailable nor maxUnavailable"),
        (edit(EPP_PDB, lambda b: b["spec"].update(maxUnavailable=0)), EPP_PDB, "every node drain and upgrade stalls"),
        (edit(EPP_PDB, lambda b: b["spec"].update(minAvailable=1)), EPP_PDB, "which the API server refuses"),
        (edit(EPP_PDB, without_maximum(minAvailable=1)), None, None),
        (edit(EPP_PDB, lambda b: b["spec"].update(maxUnavailable="50%")), None, None),
        # Kueue's manager: controllerManager.replicas, .topologySpreadConstraints (the chart reads no affinity),
        # .podDisruptionBudget.
        (edit(KUEUE, manager(lambda m: m.update(replicas=1))), KUEUE, "set controllerManager.replicas"),
        (edit(KUEUE, manager(lambda m: m.pop("topologySpreadConstraints"))), KUEUE,
         "set controllerManager.topologySpreadConstraints"),
        (edit(KUEUE, manager(lambda m: (m.pop("topologySpreadConstraints"), m.update(affinity=REQUIRED_ANTI_AFFINITY)))), KUEUE,
         "share a node"),
        (edit(KUEUE, manager(lambda m: m.pop("podDisruptionBudget"))), KUEUE,
         "set controllerManager.podDisruptionBudget.enabled"),
        (edit(KUEUE, manager(lambda m: m["podDisruptionBudget"].update(enabled=False))), KUEUE, "no PodDisruptionBudget"),
        (edit(KUEUE, manager(lambda m: m["podDisruptionBudget"].update(minAvailable=2))), KUEUE,
         "controllerManager.podDisruptionBudget makes (minAvailable 2 with as few as 2 replicas) lets no pod"),
        (edit(KUEUE, manager(lambda m: m["podDisruptionBudget"].update(minAvailable=None))), KUEUE, "neither minAvailable"),
        # The cluster autoscaler: replicaCount, topologySpreadConstraints, its chart's podDisruptionBudget (maxUnavailable 1
        # by default, merged with what the release gives).
        (edit(AUTOSCALER, values(lambda v: v.pop("replicaCount"))), AUTOSCALER, "set replicaCount to 2"),
        (edit(AUTOSCALER, values(lambda v: v.update(replicaCount=1))), AUTOSCALER, "runs as few as 1"),
        (edit(AUTOSCALER, values(lambda v: v.update(replicaCount=3))), None, None),
        (edit(AUTOSCALER, values(lambda v: v.pop("topologySpreadConstraints"))), AUTOSCALER, "share a node"),
        (edit(AUTOSCALER, values(lambda v: v.update(podDisruptionBudget=None))), AUTOSCALER, "set podDisruptionBudget"),
        (edit(AUTOSCALER, values(lambda v: v.update(podDisruptionBudget={"maxUnavailable": None}))), AUTOSCALER,
         "no PodDisruptionBudget"),
        (edit(AUTOSCALER, values(lambda v: v.update(podDisruptionBudget={"maxUnavailable": 2}))), AUTOSCALER,
         "maxUnavailable 2 of 2 replicas"),
        (edit(AUTOSCALER, values(lambda v: v.update(podDisruptionBudget={"minAvailable": 2, "maxUnavailable": None}))),
         AUTOSCALER, "podDisruptionBudget makes (minAvailable 2 with as few as 2 replicas) lets no pod be evicted"),
        # The chart's maxUnavailable 1 stays beside a minAvailable given alone: both, which the chart refuses.
        (edit(AUTOSCALER, values(lambda v: v.update(podDisruptionBudget={"minAvailable": 1}))), AUTOSCALER, "both"),
        (edit(AUTOSCALER, values(lambda v: v.update(podDisruptionBudget={"minAvailable": 1, "maxUnavailable": None}))),
         None, None),
        (edit(AUTOSCALER, values(lambda v: v.update(podDisruptionBudget={}))), None, None),
    ],
    ids=["istiod-one", "istiod-fixed-one", "istiod-fixed-three", "istiod-unspread", "istiod-spread-anyway",
         "istiod-spread-by-zone", "istiod-skew-2", "istiod-spread-selects-others", "istiod-anti-affinity",
         "istiod-preferred-anti-affinity", "istiod-budget-off", "istiod-min-available-0", "istiod-max-unavailable-all",
         "istiod-min-available-all", "istiod-max-unavailable-1", "istiod-two-budgets",
         "gateway-one", "gateway-unspread", "gateway-no-budget", "gateway-budget-of-another", "gateway-budget-blocks",
         "gateway-two-budgets", "egress-gateway-one", "egress-gateway-unspread", "egress-gateway-no-budget",
         "egress-gateway-budget-of-the-ingress",
         "knative-no-ha", "knative-three", "knative-controller-one", "knative-deprecated-override-one",
         "knative-unspread", "knative-spread-anyway", "knative-anti-affinity", "knative-bundled-budgets",
         "knative-budget-both", "knative-budget-all", "knative-controller-no-budget", "knative-net-istio-no-budget",
         "knative-budget-blocks", "knative-two-budgets",
         "picker-one", "picker-unspread", "picker-by-zone-only", "picker-no-budget", "picker-budget-selects-none",
         "picker-max-unavailable-100-percent", "picker-min-available-0", "picker-budget-of-nothing",
         "picker-max-unavailable-0", "picker-budget-both", "picker-min-available-1", "picker-max-unavailable-50-percent",
         "kueue-one", "kueue-unspread", "kueue-affinity-unread", "kueue-no-budget", "kueue-budget-off",
         "kueue-budget-blocks", "kueue-budget-null",
         "autoscaler-default-one", "autoscaler-one", "autoscaler-three", "autoscaler-unspread", "autoscaler-budget-null",
         "autoscaler-budget-emptied", "autoscaler-max-unavailable-all", "autoscaler-min-available-all",
         "autoscaler-budget-both", "autoscaler-min-available-1", "autoscaler-chart-budget"],
)  # fmt: skip
def test_what_every_request_depends_on_is_highly_available(harness, baseline, change, flagged, names):
    """Each part of the control plane in production, each of the three properties, read where the program sets it:
    a change that breaks one is refused naming the part and the key; one that keeps it is not."""
    hits = harness.analyze_stack(stack_with(baseline, change))
    assert {(d.policy, d.level, d.urn.rsplit("::", 1)[-1]) for d in hits} == (
        {("control-plane-availability", "mandatory", flagged)} if flagged else set()
    )
    assert flagged is None or any(names in d.message for d in hits), [d.message for d in hits]
