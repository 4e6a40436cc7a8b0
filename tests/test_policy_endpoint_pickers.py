"""The policy pack's endpoint picker rules (endpoint-picker-availability: the pool names the picker's Service, mTLS on
every hop, picked servers in production; control-plane-availability's picker floor outside production), the
control plane's replicas in production, and the pack's labels read from the program; validators called in this
process as the policy SDK's analyzer calls them (tests/policy_harness.py)."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pulumi
import pytest

from preview.engine import RecordedResource

from . import policy_helpers
from .helpers import ROOT, Evaluated, raw_stack
from .policy_helpers import EPP, EPP_PDB, edit, stack_with

sys.path.insert(0, str(ROOT / "policies"))
from inference_governance import control_plane  # noqa: E402

# The policy tests' module fixtures (tests/policy_helpers.py), bound here for pytest to find.
baseline, harness = policy_helpers.baseline, policy_helpers.harness


# --- endpoint pickers ----------------------------------------------------------------------------

EPP_SERVICE = "llama-1b-v1-epp-service"
POOL = "llama-1b-v1-inferencepool"
PEER = "team-a-peer-authentication"  # STRICT for the namespace


def pod_metadata(outputs: dict) -> dict:
    return outputs["spec"]["template"]["metadata"]


@pytest.mark.parametrize(
    "change, flagged",
    [
        # (Their replicas, spread and budgets: control-plane-availability, tests/test_policy_bypasses_placement.py.)
        # 1. the pool names an existing Service that selects endpoint picker pods
        (edit(POOL, lambda p: p["spec"]["endpointPickerRef"].update(name="llama-1b-v1-ep")), POOL),
        (edit(POOL, lambda p: p["spec"]["endpointPickerRef"].update(kind="Deployment", group="apps")), POOL),
        (lambda rs: [r for r in rs if r.name != EPP_SERVICE], POOL),
        (edit(EPP_SERVICE, lambda s: s["spec"].update(selector={"app.kubernetes.io/instance": "llama-1b-v1"})), POOL),
        # An endpoint picker that drops its component label escapes nothing: its pool finds no picker.
        (edit(EPP, lambda d: (d["metadata"]["labels"].pop("app.kubernetes.io/component"),
                              pod_metadata(d)["labels"].pop("app.kubernetes.io/component"))), POOL),
        # 2. in the mesh, mTLS on every hop
        (edit(EPP, lambda d: pod_metadata(d)["labels"].update({"sidecar.istio.io/inject": "false"})), EPP),
        (edit(EPP, lambda d: pod_metadata(d)["annotations"].update({"sidecar.istio.io/inject": "no"})), EPP),
        (edit(EPP, lambda d: (pod_metadata(d)["labels"].update({"sidecar.istio.io/inject": "disabled"}),
                              pod_metadata(d)["annotations"].update({"sidecar.istio.io/inject": "true"}))), EPP),
        (edit(EPP, lambda d: pod_metadata(d)["labels"].update({"sidecar.istio.io/inject": "True"})), None),
        (edit(PEER, lambda p: p["spec"]["mtls"].update(mode="PERMISSIVE")), PEER),
        (edit(PEER, lambda p: p["spec"].update(selector={"matchLabels": {"llm-d-router-gateway": "llama-1b-v1-epp"}},
                                               mtls={"mode": "DISABLE"})), PEER),
        (edit(PEER, lambda p: p["spec"].update(portLevelMtls={"8000": {"mode": "PERMISSIVE"}})), PEER),
        (edit(PEER, lambda p: p["spec"].update(portLevelMtls={"8000": {"mode": "STRICT"}})), None),
        # 3. in production, a model's Deployment-served pods are picked (only its queue is timed)...
        (lambda rs: [r for r in rs if r.name != POOL], "llama-1b-v1-deployment"),
        (edit(POOL, lambda p: p["spec"]["selector"]["matchLabels"].update({"app.kubernetes.io/instance": "llama-1b-v9"})),
         "llama-1b-v1-deployment"),
        # ... and its Knative-served ones too (queue-proxy and the activator time nothing).
        (lambda rs: [r for r in rs if r.name != "llama-8b-v1-inferencepool"], "llama-8b-v1-knative-service"),
        # A pool on an older revision of the version picks nothing Knative now serves it with.
        (edit("llama-8b-v1-inferencepool", lambda p: p["spec"]["selector"]["matchLabels"].update(
            {"serving.knative.dev/revision": "llama-8b-v1-0000000000"})), "llama-8b-v1-knative-service"),
        # team-b runs no endpoint picker but is a tenant: its namespace is promised mTLS too.
        (edit("team-b-peer-authentication", lambda p: p["spec"]["mtls"].update(mode="DISABLE")),
         "team-b-peer-authentication"),
    ],
    ids=["pool-names-no-service", "pool-names-a-deployment", "service-removed", "service-selects-the-servers",
         "picker-unlabelled", "inject-label-false", "inject-annotation-no", "label-wins-over-annotation",
         "inject-label-true", "namespace-permissive", "workload-disable", "port-permissive", "port-strict",
         "pool-removed", "pool-selects-another-version", "knative-pool-removed",
         "knative-pool-on-an-old-revision", "tenant-without-picker"],
)  # fmt: skip
def test_endpoint_picker_availability(harness, baseline, change, flagged, request):
    hits = harness.analyze_stack(stack_with(baseline, change))
    found = {(d.policy, d.level, d.urn.rsplit("::", 1)[-1]) for d in hits}
    # A picker without its component label is no picker to the egress rule either: held to REGISTRY_ONLY.
    also = {("tenant-egress-by-host", "mandatory", EPP)} if request.node.callspec.id == "picker-unlabelled" else set()
    assert found == ({("endpoint-picker-availability", "mandatory", flagged)} if flagged else set()) | also


def test_the_control_plane_runs_twice_in_production_only():
    from components.specs.knative import knative_serving
    from components.specs.mesh import istiod_values

    prod = Evaluated(raw_stack("prod"), shared=True)
    dev = Evaluated(raw_stack("dev"), shared=True)

    def of(evaluated: Evaluated, name: str) -> dict:
        return next(r for r in evaluated.records if r.name == name).outputs

    assert of(prod, "mesh-istiod")["values"]["autoscaleMin"] == 2 and of(dev, "mesh-istiod")["values"]["autoscaleMin"] == 1
    assert of(prod, "knative-serving-serving")["spec"]["high-availability"] == {"replicas": 2}
    assert of(prod, "cluster-autoscaler-release")["values"]["replicaCount"] == 2
    assert of(Evaluated(raw_stack("staging"), shared=True), "cluster-autoscaler-release")["values"]["replicaCount"] == 1
    assert "high-availability" not in of(dev, "knative-serving-serving")["spec"]
    assert istiod_values(3)["autoscaleMin"] == 3 and knative_serving(3)["spec"]["high-availability"] == {"replicas": 3}
    # One pod per node in production (a replica waits for a node of its own), the gateway behind a budget.
    from components.specs.system_charts import AUTOSCALER_POD_SELECTOR

    staging = Evaluated(raw_stack("staging"), shared=True)
    (spread,) = of(prod, "cluster-autoscaler-release")["values"]["topologySpreadConstraints"]
    assert spread["whenUnsatisfiable"] == "DoNotSchedule" and spread["labelSelector"] == {"matchLabels": AUTOSCALER_POD_SELECTOR}
    assert "topologySpreadConstraints" not in of(staging, "cluster-autoscaler-release")["values"]
    for release, selector in (("mesh-istiod", {"app": "istiod"}), ("mesh-gateway", {"istio": "ingressgateway"})):
        (spread,) = of(prod, release)["values"]["topologySpreadConstraints"]
        assert spread["whenUnsatisfiable"] == "DoNotSchedule" and spread["labelSelector"] == {"matchLabels": selector}
        assert "topologySpreadConstraints" not in of(dev, release)["values"]
    (kueue,) = of(prod, "kueue-release")["values"]["controllerManager"]["topologySpreadConstraints"]
    assert kueue["labelSelector"]["matchLabels"]["control-plane"] == "controller-manager"
    assert of(prod, "mesh-gateway-pdb")["spec"]["minAvailable"] == 1
    assert not [r for r in dev.records if r.name == "mesh-gateway-pdb"]
    # Knative's control plane one pod per node, the budgets its manifests bundle one pod at a time, the others' the
    # platform's own (knative/operator knative-v1.23.0 kodata: only activator-pdb and webhook-pdb, 80% each).
    serving = of(prod, "knative-serving-serving")["spec"]
    spread = {w["name"]: w["topologySpreadConstraints"] for w in serving["workloads"]}
    assert set(spread) == {"activator", "autoscaler", "controller", "webhook", "net-istio-controller", "net-istio-webhook"}
    assert all(
        c["labelSelector"] == {"matchLabels": {"app": name}} and c["whenUnsatisfiable"] == "DoNotSchedule"
        for name, (c,) in spread.items()
    )
    assert serving["podDisruptionBudgets"] == [
        {"name": "activator-pdb", "maxUnavailable": 1},
        {"name": "webhook-pdb", "maxUnavailable": 1},
    ]
    budgets = {
        r.outputs["spec"]["selector"]["matchLabels"]["app"]: r
        for r in prod.records
        if r.name.startswith("knative-serving-") and r.type == "kubernetes:policy/v1:PodDisruptionBudget"
    }
    assert set(budgets) == {"autoscaler", "controller", "net-istio-controller", "net-istio-webhook"}
    assert all(r.outputs["metadata"]["namespace"] == "knative-serving" for r in budgets.values())
    assert all(r.outputs["spec"]["maxUnavailable"] == 1 for r in budgets.values())
    # Declared once the operator reports Serving ready (the KnativeServing waits for its Deployments).
    (serving_urn,) = [r.urn for r in prod.records if r.name == "knative-serving-serving"]
    assert all(serving_urn in r.dependencies for r in budgets.values())
    assert "workloads" not in of(dev, "knative-serving-serving")["spec"]
    assert not [r for r in dev.records if r.type == "kubernetes:policy/v1:PodDisruptionBudget" and r.name.startswith("knative")]


def test_endpoint_picker_messages_name_the_object_and_the_fix(harness, baseline):
    (hit,) = harness.analyze_stack(stack_with(baseline, edit(EPP, lambda d: d["spec"].update(replicas=1))))
    assert hit.message.endswith(
        "\nendpoint picker team-a/llama-1b-v1-epp runs as few as 1 replica(s); production keeps at least 2 of what every "
        "request depends on, or one crash or drain takes it away: set spec.replicas to 2 or more"
    )
    (hit,) = harness.analyze_stack(stack_with(baseline, edit(POOL, lambda p: p["spec"]["endpointPickerRef"].update(name="x"))))
    assert hit.message.endswith(
        "\nInferencePool team-a/llama-1b-v1: spec.endpointPickerRef names Service team-a/x, which the stack does not "
        "declare: declare the endpoint picker's Service in the pool's namespace, or name it"
    )


def test_endpoint_pickers_outside_production(baseline):
    """The replica floor and the budget hold in the stacks the pack's config calls production (the pickers' floor
    is control-plane-availability's minEndpointPickerReplicasInProduction)."""

    def violations(records: list[RecordedResource], settings: dict[str, Any]) -> list[str]:
        messages: list[str] = []
        resources = [SimpleNamespace(resource_type=r.type, props=r.outputs, urn=r.urn) for r in records]
        args = SimpleNamespace(resources=resources, get_config=lambda: settings)
        control_plane.control_plane_availability(args, lambda message, urn=None: messages.append(message))
        return messages

    single = stack_with(
        baseline, lambda rs: [r for r in edit(EPP, lambda d: d["spec"].update(replicas=1))(rs) if r.name != EPP_PDB]
    )
    this_stack = [pulumi.get_stack()]
    assert violations(single, {"productionStacks": []}) == []
    assert len(violations(single, {"productionStacks": this_stack})) == 2  # the floor and the budget
    assert violations(single, {"productionStacks": this_stack, "minEndpointPickerReplicasInProduction": 1}) == [
        "endpoint picker team-a/llama-1b-v1-epp: no PodDisruptionBudget selects its pods, so a drain may take every "
        "replica at once: set a PodDisruptionBudget in team-a selecting its pod labels (maxUnavailable 1, or "
        "minAvailable 1)"
    ]


def test_the_packs_endpoint_picker_labels_are_the_programs():
    from inference_governance import kube

    from components.constants import LABEL_COMPONENT, LABEL_TENANT
    from components.specs.endpoint_picker.names import COMPONENT
    from platform_config.floors import FLOORS

    assert (kube.COMPONENT_LABEL, kube.ENDPOINT_PICKER, kube.TENANT_LABEL) == (LABEL_COMPONENT, COMPONENT, LABEL_TENANT)
    assert kube.FLOORS["minEndpointPickerReplicasInProduction"] == FLOORS.endpoint_picker_replicas_in_production
