"""Policy canary-weight-steps for LoRA adapter canaries: an adapter's canary rises one of its model's steps per
change, held to its model's previous steps and let by with the model's step override; what the program
records of the adapters' releases; and the pack holding an adapter canary to the previous stack file."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from components.model_route import canary_releases
from components.specs.routes import model_release
from platform_config import release as release_record
from preview import previous_releases as previous

from .canary_policy_helpers import PREVIOUS_10, as_output, copy_of, released, violations
from .helpers import ROOT, run_preview, validate, write_stack

sys.path.insert(0, str(ROOT / "policies"))
from inference_governance import canary  # noqa: E402

# --- LoRA adapter canaries: the same rule, the model's steps and override ---------------------------

ADAPTER_RELEASES = "inference.platform/adapter-releases"
R1, R2 = "s3://adapters/chat-sql/2026-01-01", "s3://adapters/chat-sql/2026-02-01"


def adapter_release(weight: int, canary_version: str | None = "r2", **weights: str) -> dict[str, Any]:
    release: dict[str, Any] = {"stable": "r1", "canary": canary_version, "canaryWeight": weight, "stableWeights": R1}
    if canary_version is not None:
        release["canaryWeights"] = R2
    return {**release, **weights}


def with_adapters(props: dict[str, Any], **releases: dict[str, Any]) -> dict[str, Any]:
    props["metadata"]["annotations"][ADAPTER_RELEASES] = json.dumps(releases)
    return props


def previous_with_adapters(**releases: dict[str, Any]) -> dict[str, Any]:
    entry = {"stable": "v1", "canary": "v2", "canaryWeight": 10, "adapters": releases}
    return {"previousReleases": {"chat": entry}}


def test_an_adapter_canary_rises_one_of_its_models_steps_per_change():
    before = previous_with_adapters(**{"chat-sql": adapter_release(10)})
    (message,) = violations(
        canary.canary_weight_steps, with_adapters(released("v1", "v2", 10), **{"chat-sql": adapter_release(50)}), before
    )
    assert message.startswith("VirtualService team-a/chat: model chat adapter chat-sql: canary r2 weight 10% -> 50% skips steps")
    assert "the next allowed step is 25%" in message
    assert (
        violations(
            canary.canary_weight_steps, with_adapters(released("v1", "v2", 10), **{"chat-sql": adapter_release(25)}), before
        )
        == []
    )
    # Promotion only from the last step; a rollback or a removed canary any time.
    r2_stable = {"chat-sql": {"stable": "r2", "canary": None, "canaryWeight": 0, "stableWeights": R2}}
    promoted = with_adapters(released("v1", "v2", 10), **r2_stable)
    (early,) = violations(canary.canary_weight_steps, promoted, before)
    assert "model chat adapter chat-sql: canary r2 promoted to stable at 10%" in early
    assert violations(canary.canary_weight_steps, promoted, previous_with_adapters(**{"chat-sql": adapter_release(100)})) == []
    for back in (adapter_release(0), adapter_release(0, None)):
        assert violations(canary.canary_weight_steps, with_adapters(released("v1", "v2", 10), **{"chat-sql": back}), before) == []


def test_an_adapter_canary_is_held_to_its_models_previous_steps():
    before = previous_with_adapters(**{"chat-sql": adapter_release(20)})
    before["previousReleases"]["chat"]["steps"] = [20, 100]
    props = with_adapters(released("v1", "v2", 10), **{"chat-sql": adapter_release(100)})
    assert violations(canary.canary_weight_steps, props, before) == []  # 20 -> 100 is the next of the model's steps
    # With the default steps the same change skips two.
    del before["previousReleases"]["chat"]["steps"]
    (message,) = violations(canary.canary_weight_steps, props, before)
    assert "weight 20% -> 100% skips steps" in message


def test_the_models_step_override_lets_an_adapters_change_by_and_is_recorded():
    before = previous_with_adapters(**{"chat-sql": adapter_release(10)})
    props = with_adapters(released("v1", "v2", 10, override="incident 43: the sql fix"), **{"chat-sql": adapter_release(100)})
    assert violations(canary.canary_weight_steps, props, before) == []
    (recorded,) = violations(canary.canary_step_override, props, before)
    assert "('incident 43: the sql fix')" in recorded and "model chat adapter chat-sql: canary r2 weight 10% -> 100%" in recorded
    # The previous change's reason does not cover this one.
    before["previousReleases"]["chat"]["stepOverride"] = "incident 43: the sql fix"
    (found,) = violations(canary.canary_weight_steps, props, before)
    assert "adapter chat-sql" in found and "was the previous change's" in found


def test_a_new_adapter_canary_starts_at_the_first_step_at_most():
    none_yet = previous_with_adapters()
    assert (
        violations(
            canary.canary_weight_steps, with_adapters(released("v1", "v2", 10), **{"chat-sql": adapter_release(10)}), none_yet
        )
        == []
    )
    (message,) = violations(
        canary.canary_weight_steps, with_adapters(released("v1", "v2", 10), **{"chat-sql": adapter_release(25)}), none_yet
    )
    assert "model chat adapter chat-sql is new: its canary r2 starts at 25%" in message
    # So are a new model's adapters.
    new_model = with_adapters(released("v1", "v2", 10), **{"chat-sql": adapter_release(25)})
    (fresh,) = violations(canary.canary_weight_steps, new_model, {"previousReleases": {}})
    assert "model chat adapter chat-sql is new" in fresh
    # New weights under the canary revision's name start it again.
    before = previous_with_adapters(**{"chat-sql": adapter_release(25)})
    moved = with_adapters(released("v1", "v2", 10), **{"chat-sql": adapter_release(25, canaryWeights=R1)})
    (again,) = violations(canary.canary_weight_steps, moved, before)
    assert "new canary r2" in again


def test_a_previous_release_that_recorded_no_adapters_has_nothing_to_compare():
    props = with_adapters(released("v1", "v2", 10), **{"chat-sql": adapter_release(100)})
    assert violations(canary.canary_weight_steps, props, PREVIOUS_10) == []
    # An unreadable annotation is a violation, as the model's are.
    props["metadata"]["annotations"][ADAPTER_RELEASES] = "[not json"
    (message,) = violations(canary.canary_weight_steps, props, previous_with_adapters())
    assert "is not a JSON object of adapter releases" in message


def test_prods_route_and_output_record_the_adapters_releases(prod_raw, tmp_path):
    plan = validate(prod_raw)
    model = plan.model("llama-8b").model
    support = {
        "stable": "r1",
        "canary": "r2",
        "canaryWeight": 10,
        "stableWeights": "s3://inference-prod-adapters/llama-3.1-8b/support/2026-10-02",
        "canaryWeights": "s3://inference-prod-adapters/llama-3.1-8b/support/2026-11-20",
    }
    # Adapters with revisions only: the sql adapter has one source, no release.
    assert json.loads(release_record.to_annotations(model_release(model))[ADAPTER_RELEASES]) == {"llama-3.1-8b-support": support}
    output = canary_releases(plan.routes)
    assert output["llama-8b"]["adapters"] == {"llama-3.1-8b-support": support}
    assert output["llama-70b"]["adapters"] == {}
    # Read back by CI from the outputs, and from the stack file as the preview's --previous-stack-file does.
    assert as_output(previous.from_outputs({"canaryReleases": output})) == output
    path = write_stack(tmp_path, prod_raw)
    assert release_record.to_output(previous.from_stack_file(path)["llama-8b"])["adapters"] == {"llama-3.1-8b-support": support}


def test_an_adapter_canary_weight_off_the_models_steps_is_refused(prod_raw):
    from .helpers import config_problems

    prod_raw["models"][1]["adapters"][0]["release"]["canaryWeight"] = 15
    (problem,) = config_problems(prod_raw)
    assert problem.startswith("inference-platform:models[1].adapters[0].release.canaryWeight: canaryWeight 15 is not a step")
    assert "10, 25, 50, 100 (the release.steps of model 'llama-8b'" in problem
    # A step of the model's own steps is one.
    prod_raw["models"][1]["release"]["steps"] = [15, 100]
    prod_raw["models"][1]["release"]["canaryWeight"] = 15
    validate(prod_raw)


@pytest.mark.slow
def test_the_pack_holds_an_adapter_canary_to_the_previous_stack_file(tmp_path, prod_raw):
    (tmp_path / "before").mkdir()
    previous_file = write_stack(tmp_path / "before", copy_of(prod_raw), {"aws:region": "us-east-1"})
    prod_raw["models"][1]["adapters"][0]["release"]["canaryWeight"] = 50
    stack = write_stack(tmp_path, prod_raw, {"aws:region": "us-east-1"})
    out = tmp_path / "out"
    result = run_preview(
        "--stack", "test", "--config-file", str(stack), "--out", str(out), "--previous-stack-file", str(previous_file)
    )
    assert result.returncode == 1, result.stdout + result.stderr
    (line,) = [line for line in result.stdout.splitlines() if "MANDATORY canary-weight-steps" in line]
    assert "model llama-8b adapter llama-3.1-8b-support: canary r2 weight 10% -> 50% skips steps" in line
