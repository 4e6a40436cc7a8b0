"""The pack's serving-performance policy as a pure function (policies/inference_governance/serving_performance.py):
what it says of a vLLM workload given the preview's verdicts, or none. The whole path, a preview's pack-config.json
through the pack's own process, is in test_serving_performance.py."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pulumi

from components.constants import LABEL_MODEL as MODEL_LABEL
from components.plan_reports import SERVING_SHAPE_ANNOTATION
from preview.performance import PERFORMANCE_POLICY, pack_config
from preview.report import Section

from .helpers import ROOT

sys.path.insert(0, str(ROOT / "policies"))
from inference_governance.serving_performance import serving_performance  # noqa: E402

DEPLOYMENT = "kubernetes:apps/v1:Deployment"


def this_stack() -> list[str]:
    """The stack the pack's is_production asks about: whatever the process's Pulumi settings name now (an in-process
    evaluation in the same worker sets them)."""
    return [pulumi.get_stack()]


def said(props: dict[str, Any], config: dict[str, Any]) -> list[str]:
    found: list[str] = []
    args = SimpleNamespace(resource_type=DEPLOYMENT, props=props, urn="urn:test", get_config=lambda: config)
    serving_performance(args, lambda message, urn=None: found.append(message))
    return found


def workload(shape: str | None) -> dict[str, Any]:
    annotations = {} if shape is None else {SERVING_SHAPE_ANNOTATION: shape}
    pods = {"metadata": {"labels": {MODEL_LABEL: "chat"}}, "spec": {"containers": [{"name": "vllm"}]}}
    return {"metadata": {"name": "chat-v1", "namespace": "team-a", "annotations": annotations}, "spec": {"template": pods}}


VERDICTS = {
    "aaaa": {"server": "chat/v1", "failures": [], "misses": []},
    "bbbb": {"server": "chat/v2", "failures": ["models[0].server.maxModelLen: beyond the context"], "misses": []},
    "dddd": {"server": "chat/v3", "failures": [], "misses": ["models[0].autoscaling.maxReplicas: the peak needs 9"]},
}


def test_a_model_server_without_a_shape_is_refused_in_production_only():
    (message,) = said(workload(None), {"productionStacks": this_stack()})
    assert f"chat-v1: a model server without its {SERVING_SHAPE_ANNOTATION} annotation" in message
    assert said(workload(None), {"productionStacks": []}) == []
    # Another workload (the endpoint picker's, a batch job's) is not a server this policy judges.
    picker = workload(None)
    picker["spec"]["template"]["spec"]["containers"] = [{"name": "epp"}]
    assert said(picker, {"productionStacks": this_stack()}) == []


def test_a_judged_shape_passes_and_its_failures_are_each_a_violation():
    assert said(workload("aaaa"), {"servingVerdicts": VERDICTS, "productionStacks": []}) == []
    assert said(workload("bbbb"), {"servingVerdicts": VERDICTS, "productionStacks": []}) == [
        "chat/v2: models[0].server.maxModelLen: beyond the context"
    ]


def test_a_predicted_miss_fails_in_production_or_at_the_configured_level():
    """The pack's productionStacks decide, not the environment the preview judged the stack by; a level configured
    for the stage overrides that default either way."""
    miss = ["chat/v3: models[0].autoscaling.maxReplicas: the peak needs 9"]
    assert said(workload("dddd"), {"servingVerdicts": VERDICTS, "productionStacks": this_stack()}) == miss
    assert said(workload("dddd"), {"servingVerdicts": VERDICTS, "productionStacks": []}) == []
    assert said(workload("dddd"), {"servingVerdicts": VERDICTS, "productionStacks": [], "latencyLevel": "mandatory"}) == miss
    assert (
        said(workload("dddd"), {"servingVerdicts": VERDICTS, "productionStacks": this_stack(), "latencyLevel": "advisory"}) == []
    )


def test_a_shape_the_verdicts_did_not_judge_is_refused_in_any_stack():
    (message,) = said(workload("cccc"), {"servingVerdicts": VERDICTS, "productionStacks": []})
    assert "chat-v1: its serving shape cccc is not one the given verdicts judged" in message


def test_without_verdicts_production_is_refused_and_elsewhere_nothing_is_said():
    (message,) = said(workload("aaaa"), {"productionStacks": this_stack()})
    assert "no verdict of the preview's Serving performance stage was given" in message
    assert "pack-config.json" in message
    assert said(workload("aaaa"), {"productionStacks": []}) == []


def test_the_preview_writes_no_verdicts_when_the_stage_did_not_answer():
    unanswered = Section("Serving performance", "not run: ...", warning=True, data={"problem": "not run"})
    assert pack_config(unanswered) == {PERFORMANCE_POLICY: {"enforcementLevel": "mandatory", "latencyLevel": None}}
    assert pack_config(unanswered, "advisory")[PERFORMANCE_POLICY]["latencyLevel"] == "advisory"
    answered = Section("Serving performance", "1 server", data={"servingVerdicts": VERDICTS})
    assert pack_config(answered)[PERFORMANCE_POLICY]["servingVerdicts"] == VERDICTS
    # A stack without servers has nothing to judge, and says so with an empty set.
    assert pack_config(None)[PERFORMANCE_POLICY]["servingVerdicts"] == {}
