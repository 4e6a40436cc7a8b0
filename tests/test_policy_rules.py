"""The policy pack's serving rules, each with a violating and a compliant case, its validators called in this process
as the policy SDK's analyzer calls them (tests/policy_harness.py): GPU requests, time slicing, draining, disruption
budgets, autoscaling (HPA and Knative), canary routes, quotas and priorities, LoRA adapters, the advisory rules;
plus the validators called as pure functions."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace
from typing import Any

import pulumi
import pytest

from preview.engine import RecordedResource

from . import policy_helpers
from .helpers import ROOT
from .policy_helpers import DEPLOYMENT, HPA, KSVC, analyze, analyze_stack, both, find, stack_with, vllm

sys.path.insert(0, str(ROOT / "policies"))
from inference_governance import autoscaling, gpu_placement  # noqa: E402

# The policy tests' module fixtures (tests/policy_helpers.py), bound here for pytest to find.
baseline, harness = policy_helpers.baseline, policy_helpers.harness


# --- rule 1 --------------------------------------------------------------------------------------


def test_gpu_requests_and_limits(harness, baseline):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    del vllm(record)["resources"]["limits"]["nvidia.com/gpu"]
    assert analyze(harness, record) == {"gpu-requests-and-limits": "mandatory"}
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    del vllm(record)["resources"]["requests"]["cpu"]
    assert analyze(harness, record) == {"gpu-requests-and-limits": "mandatory"}
    knative = find(baseline, KSVC, "llama-8b-v1-knative-service")
    vllm(knative)["resources"]["requests"]["nvidia.com/mig-3g.40gb"] = "2"
    assert analyze(harness, knative) == {"gpu-requests-and-limits": "mandatory"}


# --- rule 2 --------------------------------------------------------------------------------------


def test_latency_sensitive_not_time_sliced(harness, baseline):
    def slice_h100(records):
        for r in records:
            if r.type == "inference-platform:gpu-node-pool:GpuNodePool" and r.name == "h100":
                r.outputs["sharing"] = "timeSlicing"
            if r.type == "aws:eks/nodeGroup:NodeGroup" and r.name == "h100-nodes":
                r.outputs["labels"]["inference.platform/gpu-sharing"] = "timeSlicing"
        return records

    hits = harness.analyze_stack(stack_with(baseline, slice_h100))
    flagged = {d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "latency-sensitive-not-time-sliced"}
    assert flagged == {
        "llama-70b-v1-deployment",
        "llama-8b-v1-knative-service",
        "llama-8b-v2-knative-service",
        "llama-1b-v1-deployment",
    }


# --- rule 3 --------------------------------------------------------------------------------------


def test_graceful_drain(harness, baseline):
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    record.inputs["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 30
    assert analyze(harness, record) == {"inference-graceful-drain": "mandatory"}
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    del vllm(record)["lifecycle"]
    assert analyze(harness, record) == {"inference-graceful-drain": "mandatory"}


def test_pdb_for_replicated_inference(harness, baseline):
    without = stack_with(baseline, lambda rs: [r for r in rs if r.name != "llama-70b-v1-pdb"])
    hits = harness.analyze_stack(without)
    assert [d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "inference-disruption-budget"] == ["llama-70b-v1-deployment"]


# --- rule 4 --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        lambda spec: spec["behavior"]["scaleDown"].update(stabilizationWindowSeconds=60),
        lambda spec: spec.update(
            metrics=[
                {
                    "type": "Resource",
                    "resource": {"name": "nvidia.com/gpu", "target": {"type": "Utilization", "averageUtilization": 70}},
                }
            ]
        ),
        lambda spec: spec.update(maxReplicas=1),
        lambda spec: spec.update(minReplicas=1),  # the prod stack is production: at least 2
        lambda spec: spec["behavior"]["scaleDown"].update(policies=[{"type": "Percentage", "value": 50, "periodSeconds": 60}]),
        lambda spec: spec.pop("behavior"),
    ],
    ids=["short-stabilization", "gpu-resource-metric", "max-below-min", "min-1-in-production", "bad-policy-type", "no-behavior"],
)
def test_hpa_behavior(harness, baseline, change):
    record = find(baseline, HPA, "llama-70b-v1-hpa")
    change(record.inputs["spec"])
    assert analyze(harness, record) == {"hpa-behavior": "mandatory"}


# --- rule 5 --------------------------------------------------------------------------------------


def test_knative_autoscaling(harness, baseline):
    record = find(baseline, KSVC, "llama-8b-v1-knative-service")
    del record.inputs["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/max-scale"]
    assert analyze(harness, record) == {"knative-autoscaling": "mandatory"}


@pytest.mark.parametrize("burst", [None, "211", "-1", "0.0"])
def test_knative_services_keep_the_activator_out_of_the_path(harness, baseline, burst):
    record = find(baseline, KSVC, "llama-8b-v1-knative-service")
    assert analyze(harness, record) == {}
    annotations = record.inputs["spec"]["template"]["metadata"]["annotations"]
    if burst is None:
        del annotations["autoscaling.knative.dev/target-burst-capacity"]
    else:
        annotations["autoscaling.knative.dev/target-burst-capacity"] = burst
    assert analyze(harness, record) == {"knative-autoscaling": "mandatory"}


@pytest.mark.parametrize("min_scale", ["0", "", "one"])
def test_latency_sensitive_min_scale(harness, baseline, min_scale):
    def cold(records):
        for record in records:
            if record.name == "llama-8b-v1-knative-service":
                record.outputs["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] = min_scale
        return records

    hits = harness.analyze_stack(stack_with(baseline, cold))
    assert [(d.policy, d.urn.rsplit("::", 1)[-1]) for d in hits] == [
        ("latency-sensitive-min-scale", "llama-8b-v1-knative-service")
    ]


def test_a_batch_service_may_scale_to_zero(harness, baseline):
    # The program keeps one replica behind the labeller's endpoint pickers; the pack itself lets a batch
    # profile's service go to zero.
    record = find(baseline, KSVC, "batch-labeller-v1-knative-service")
    for state in {id(s): s for s in (record.inputs, record.outputs)}.values():
        state["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] = "0"
    assert analyze(harness, record) == {}
    assert analyze_stack(harness, [record if r.urn == record.urn else r for r in baseline.records]) == {}


# --- rule 6 --------------------------------------------------------------------------------------


def _routes(records) -> list[dict]:
    (vs,) = [r for r in records if r.name == "llama-8b-route-virtual-service"]
    return vs.outputs["spec"]["http"]


def test_canary_weights_must_add_up(harness, baseline):
    def skew(records):
        next(r for r in _routes(records) if r["name"] == "premium-weighted")["route"][1]["weight"] = 5
        return records

    assert analyze_stack(harness, stack_with(baseline, skew)) == {"canary-routes": "mandatory"}


def test_override_routes_come_first(harness, baseline):
    def reorder(records):
        routes = _routes(records)
        routes.append(routes.pop(0))
        return records

    assert analyze_stack(harness, stack_with(baseline, reorder)) == {"canary-routes": "mandatory"}


def test_every_subset_exists(harness, baseline):
    without = stack_with(baseline, lambda rs: [r for r in rs if r.name != "llama-70b-route-destination-rule-v1-epp"])
    assert analyze_stack(harness, without) == {"canary-routes": "mandatory"}


# --- rule 7 --------------------------------------------------------------------------------------


def test_gpu_namespace_needs_quotas(harness, baseline):
    without = stack_with(
        baseline,
        lambda rs: [r for r in rs if not (r.type == "kubernetes:core/v1:ResourceQuota" and r.name.startswith("team-a-"))],
    )
    hits = analyze_stack(harness, without)
    assert hits["gpu-quota-and-priority"] == "mandatory"


def test_gpu_workload_needs_an_existing_priority_class(harness, baseline):
    def rename(records):
        for spec in both(next(r for r in records if r.name == "llama-1b-v1-deployment")):
            spec["priorityClassName"] = "vip"
        return records

    assert analyze_stack(harness, stack_with(baseline, rename)) == {"gpu-quota-and-priority": "mandatory"}


def test_experiments_cannot_preempt(harness, baseline):
    def preempting(records):
        record = next(r for r in records if r.name == "inference-experiment")
        record.outputs["preemptionPolicy"] = "PreemptLowerPriority"
        return records

    assert analyze_stack(harness, stack_with(baseline, preempting)) == {"gpu-quota-and-priority": "mandatory"}


# --- advisory ------------------------------------------------------------------------------------


def test_advisory_rules(harness, baseline):
    without_monitor = stack_with(baseline, lambda rs: [r for r in rs if r.name != "llama-70b-v1-service-monitor"])
    assert analyze_stack(harness, without_monitor) == {"model-server-monitoring": "advisory"}
    record = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment")
    del record.inputs["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert analyze(harness, record) == {"gpu-topology-spread": "advisory"}


# --- the validators as pure functions ------------------------------------------------------------


def collect(validator, resource_type: str, props: dict[str, Any], config: dict[str, Any] | None = None) -> list[str]:
    messages: list[str] = []
    args = SimpleNamespace(resource_type=resource_type, props=props, get_config=lambda: config or {})
    validator(args, lambda message, urn=None: messages.append(message))
    return messages


def test_validators_are_pure_functions(baseline):
    deployment = find(baseline, DEPLOYMENT, "llama-70b-v1-deployment").inputs
    assert collect(gpu_placement.gpu_requests_and_limits, DEPLOYMENT, deployment) == []
    del deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"]
    (message,) = collect(gpu_placement.gpu_requests_and_limits, DEPLOYMENT, deployment)
    assert "requests no memory" in message
    hpa = find(baseline, HPA, "llama-70b-v1-hpa").inputs
    this_stack = [pulumi.get_stack()]
    assert collect(autoscaling.hpa_behavior, HPA, hpa, {"productionStacks": this_stack}) == []
    hpa["spec"]["minReplicas"] = 1
    assert collect(autoscaling.hpa_behavior, HPA, hpa, {"productionStacks": []}) == []
    assert collect(autoscaling.hpa_behavior, HPA, hpa, {"productionStacks": this_stack}) == [
        "minReplicas is 1; production autoscalers keep at least 2 replicas"
    ]
    # Not its kind: nothing to say.
    assert collect(autoscaling.hpa_behavior, DEPLOYMENT, hpa) == []


def test_knative_services_need_a_disruption_budget(harness, baseline):
    without = stack_with(baseline, lambda rs: [r for r in rs if r.name != "llama-8b-v1-pdb"])
    hits = harness.analyze_stack(without)
    assert [d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "inference-disruption-budget"] == [
        "llama-8b-v1-knative-service"
    ]


def test_override_header_is_read_from_the_virtual_service(harness, baseline):
    def custom_header(records):
        (vs,) = [r for r in records if r.name == "llama-8b-route-virtual-service"]
        vs.outputs["metadata"]["annotations"]["inference.platform/override-header"] = "x-variant"
        for route in vs.outputs["spec"]["http"]:
            for match in route.get("match", []):
                headers = match.get("headers", {})
                if "x-model-version" in headers:
                    headers["x-variant"] = headers.pop("x-model-version")
        routes = vs.outputs["spec"]["http"]
        routes.append(routes.pop(0))  # an override route after the others
        return records

    assert analyze_stack(harness, stack_with(baseline, custom_header)) == {"canary-routes": "mandatory"}


# --- LoRA adapters ------------------------------------------------------------------------------

LORA_ADAPTERS = "inference.platform/lora-adapters"


def pod_annotations(record: RecordedResource) -> list[dict]:
    """The pod template's annotations in inputs and outputs, to edit them alike."""
    templates = [record.inputs["spec"]["template"], record.outputs["spec"]["template"]]
    templates = templates[:1] if templates[0] is templates[1] else templates
    return [t["metadata"]["annotations"] for t in templates]


def test_an_adapter_on_another_tenants_base_is_refused(harness, baseline):
    record = find(baseline, KSVC, "llama-8b-v1-knative-service")
    for pod in pod_annotations(record):
        adapters = json.loads(pod[LORA_ADAPTERS])
        assert adapters["llama-3.1-8b-sql"] == {
            "tenant": "serving",
            "base": "llama-3.1-8b-instruct",
            "modules": ["llama-3.1-8b-sql"],
        }
        adapters["llama-3.1-8b-sql"]["tenant"] = "team-a"
        pod[LORA_ADAPTERS] = json.dumps(adapters)
    assert analyze(harness, record) == {"adapter-on-own-tenants-base": "mandatory"}
    for pod in pod_annotations(record):
        pod[LORA_ADAPTERS] = "[not an object"
    assert analyze(harness, record) == {"adapter-on-own-tenants-base": "mandatory"}


def test_an_adapter_name_held_by_two_base_models_is_refused(harness, baseline):
    def load_on_70b(records: list[RecordedResource]) -> list[RecordedResource]:
        source = next(r for r in records if r.name == "llama-8b-v1-knative-service")
        target = next(r for r in records if r.name == "llama-70b-v1-deployment")
        support = json.loads(pod_annotations(source)[0][LORA_ADAPTERS])["llama-3.1-8b-support"]
        for pod in pod_annotations(target):
            pod[LORA_ADAPTERS] = json.dumps({"llama-3.1-8b-support": {**support, "tenant": "serving"}})
        return records

    hits = harness.analyze_stack(stack_with(baseline, load_on_70b))
    flagged = sorted(d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "adapter-names-unique")
    # Every server of the adapter's base is flagged too: the base's versions and its batch model's.
    assert flagged == [
        "llama-70b-v1-deployment",
        "llama-8b-batch-v1-knative-service",
        "llama-8b-v1-knative-service",
        "llama-8b-v2-knative-service",
    ]


def test_a_batch_model_loading_its_bases_adapters_is_no_second_base(harness, baseline):
    # prod's llama-8b-batch takes llama-8b's batch tier and loads its adapters, declaring llama-8b's name as their base.
    batch = find(baseline, KSVC, "llama-8b-batch-v1-knative-service")
    declared = json.loads(pod_annotations(batch)[0][LORA_ADAPTERS])
    assert {a["base"] for a in declared.values()} == {"llama-3.1-8b-instruct"}
    assert not [d for d in harness.analyze_stack(stack_with(baseline, list)) if d.policy == "adapter-names-unique"]

    # A server that does not answer to the declared base's name is another base, whatever it declares.
    def stop_answering_to_the_base(records: list[RecordedResource]) -> list[RecordedResource]:
        target = next(r for r in records if r.name == "llama-8b-batch-v1-knative-service")
        for spec in both(target):
            args = spec["containers"][0]["args"]
            args.remove("llama-3.1-8b-instruct")
        return records

    hits = harness.analyze_stack(stack_with(baseline, stop_answering_to_the_base))
    flagged = sorted({d.urn.rsplit("::", 1)[-1] for d in hits if d.policy == "adapter-names-unique"})
    assert "llama-8b-batch-v1-knative-service" in flagged


def test_an_adapter_named_like_a_served_model_is_refused(harness, baseline):
    def answer_to_the_adapter(records: list[RecordedResource]) -> list[RecordedResource]:
        target = next(r for r in records if r.name == "llama-1b-v1-deployment")
        for spec in both(target):
            args = spec["containers"][0]["args"]
            args.insert(args.index("--served-model-name") + 2, "llama-3.1-8b-sql")
        return records

    hits = harness.analyze_stack(stack_with(baseline, answer_to_the_adapter))
    assert {d.policy for d in hits} == {"adapter-names-unique"}
    assert hits and all("also the served name of team-a/llama-1b" in d.message for d in hits)
