"""Policy canary-weight-steps: a canary's weight rises one configured step per change, and it
becomes stable only from the last step, unless the release's step override gives a reason; held
to the previous releases the policy config hands the pack (issue 14).

The rule as a pure function and as a validator with a collecting report_violation; where the
previous releases come from (a baseline preview, a previous stack file, the stack's outputs);
what the program records on each model's route; and the whole pack through the analyzer
protocol, run by the offline preview on a stack file. The same rule for LoRA adapter canaries:
tests/test_canary_policy_adapters.py."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
import yaml

from components.model_route import canary_releases
from components.specs.routes import model_release
from platform_config import release as release_record
from preview import previous_releases as previous

from .canary_policy_helpers import PREVIOUS_10, VIRTUAL_SERVICE, as_output, released, route, violations
from .helpers import ROOT, Evaluated, raw_stack, run_preview, set_at, validate, write_stack

sys.path.insert(0, str(ROOT / "policies"))
from inference_governance import canary  # noqa: E402
from inference_governance.canary import Release, step_violation  # noqa: E402

STEPS = (10, 25, 50, 100)
# staging's summarizer versions, as its stack file pins them.
STAGING_V1_SHA, STAGING_V2_SHA = "7ae557604adf67be50417f59c2c2f167def9a775", "989aa7980e4cf806f80c7fef2b1adb7bc71aa306"
SERVED = {
    "stableWeights": f"hf://Qwen/Qwen2.5-0.5B-Instruct@{STAGING_V1_SHA}",
    "canaryWeights": f"hf://Qwen/Qwen2.5-1.5B-Instruct@{STAGING_V2_SHA}",
}


# --- the rule --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "before, after, allowed",
    [
        (Release("v1", "v2", 10), Release("v1", "v2", 25), True),
        (Release("v1", "v2", 25), Release("v1", "v2", 50), True),
        (Release("v1", "v2", 10), Release("v1", "v2", 50), False),
        (Release("v1", "v2", 0), Release("v1", "v2", 10), True),
        (Release("v1", "v2", 0), Release("v1", "v2", 25), False),
        (Release("v1", "v2", 10), Release("v1", "v2", 10), True),
        (Release("v1", "v2", 50), Release("v1", "v2", 10), True),
        (Release("v1", "v2", 25), Release("v1", "v2", 0), True),
        (Release("v1", "v2", 25), Release("v1", None, 0), True),
        (Release("v1", "v2", 100), Release("v2", None, 0), True),
        (Release("v1", "v2", 50), Release("v2", None, 0), False),
        (Release("v1", "v2", 100), Release("v2", "v3", 10), True),
        (Release("v1", "v2", 100), Release("v2", "v3", 25), False),
        (Release("v1", None, 0), Release("v1", "v2", 10), True),
        (Release("v1", None, 0), Release("v1", "v2", 25), False),
        (Release("v1", "v2", 50), Release("v1", "v3", 25), False),
        (Release("v1", "v2", 50), Release("v1", "v3", 10), True),
        (Release("v1", None, 0), Release("v3", None, 0), False),
    ],
    ids=["10-to-25", "25-to-50", "10-to-50", "0-to-10", "0-to-25", "unchanged", "down", "rollback-to-0",
         "canary-removed", "promoted-from-100", "promoted-from-50", "promoted-then-new-canary-at-10",
         "promoted-then-new-canary-at-25", "first-canary-at-10", "first-canary-at-25",
         "replaced-canary-at-25", "replaced-canary-at-10", "stable-replaced-without-canary"],
)  # fmt: skip
def test_the_step_rule(before, after, allowed):
    assert (step_violation("chat", before, after) is None) is allowed


def test_a_new_model_starts_at_the_first_step_at_most():
    assert step_violation("chat", None, Release("v1", "v2", 10)) is None
    assert step_violation("chat", None, Release("v1", None, 0)) is None
    message = step_violation("chat", None, Release("v1", "v2", 25))
    assert message is not None and "model chat is new" in message and "first step 10%" in message


def test_the_violation_names_model_weights_and_the_next_step():
    message = step_violation("chat", Release("v1", "v2", 10), Release("v1", "v2", 50))
    assert message is not None
    assert "model chat: canary v2 weight 10% -> 50% skips steps: the next allowed step is 25%" in message
    assert "stepOverride" in message
    promoted = step_violation("chat", Release("v1", "v2", 50), Release("v2", None, 0))
    assert promoted is not None and "promoted to stable at 50%" in promoted and "next allowed step is 100%" in promoted


def test_the_previous_steps_hold_for_the_change_that_replaces_them():
    """Rewriting the steps to [100] in the same change must not let a canary jump to 100."""
    before = Release("v1", "v2", 10, steps=STEPS)
    assert step_violation("chat", before, Release("v1", "v2", 100, steps=(100,))) is not None
    assert step_violation("chat", before, Release("v1", "v2", 25, steps=(100,))) is None
    # Without recorded steps the config's defaults are the rule, never the new release's.
    assert step_violation("chat", Release("v1", "v2", 10), Release("v1", "v2", 50, steps=(10, 50, 100))) is not None
    assert step_violation("chat", Release("v1", "v2", 10), Release("v1", "v2", 25, steps=(10, 50, 100))) is None


# --- the validators ----------------------------------------------------------------------------


def test_validator_reports_a_skipped_step():
    (message,) = violations(canary.canary_weight_steps, released("v1", "v2", 50), PREVIOUS_10)
    assert message.startswith("VirtualService team-a/chat: model chat: canary v2 weight 10% -> 50%")
    assert violations(canary.canary_weight_steps, released("v1", "v2", 25), PREVIOUS_10) == []


def test_an_override_with_a_reason_lets_the_change_by_and_is_recorded():
    props = released("v1", "v2", 50, override="incident 42: v1 leaks memory")
    assert violations(canary.canary_weight_steps, props, PREVIOUS_10) == []
    (recorded,) = violations(canary.canary_step_override, props, PREVIOUS_10)
    assert "step override in force ('incident 42: v1 leaks memory')" in recorded and "10% -> 50%" in recorded
    # A change within the steps records nothing.
    assert violations(canary.canary_step_override, released("v1", "v2", 25, override="not needed here"), PREVIOUS_10) == []


def test_nothing_to_compare_passes():
    props = released("v1", "v2", 100)
    assert violations(canary.canary_weight_steps, props, {}) == []
    assert violations(canary.canary_weight_steps, props, None) == []
    # A route the platform did not build declares no release.
    assert violations(canary.canary_weight_steps, route(), PREVIOUS_10) == []
    assert violations(canary.canary_weight_steps, props, PREVIOUS_10, type_="kubernetes:core/v1:Service") == []


def test_a_model_missing_from_the_previous_releases_is_new():
    config: dict[str, Any] = {"previousReleases": {}}
    assert violations(canary.canary_weight_steps, released("v1", "v2", 10), config) == []
    (message,) = violations(canary.canary_weight_steps, released("v1", "v2", 25), config)
    assert "model chat is new" in message


@pytest.mark.parametrize("weight", ["fifty", "101", "-5"])
def test_unreadable_release_annotations_are_a_violation(weight):
    props = released("v1", "v2", 10)
    props["metadata"]["annotations"]["inference.platform/canary-weight"] = weight
    (message,) = violations(canary.canary_weight_steps, props, PREVIOUS_10)
    assert "release annotations cannot be read" in message


# --- what the program records ------------------------------------------------------------------


@pytest.fixture(scope="module")
def staging() -> Evaluated:
    return Evaluated(raw_stack("staging"), shared=True)


def test_each_route_declares_its_release(staging):
    (service,) = [r for r in staging.of_type(VIRTUAL_SERVICE) if r["inputs"]["metadata"]["name"] == "summarizer"]
    annotations = service["inputs"]["metadata"]["annotations"]
    assert annotations["inference.platform/stable-version"] == "v1"
    assert annotations["inference.platform/canary-version"] == "v2"
    assert annotations["inference.platform/canary-weight"] == "10"
    assert annotations["inference.platform/canary-steps"] == "10,25,50,100"
    assert "inference.platform/canary-step-override" not in annotations


def test_the_step_override_reason_is_on_the_route(staging_raw):
    set_at(staging_raw, ("models", 0, "release", "stepOverride"), {"reason": "incident 42: roll forward"})
    plan = validate(staging_raw)
    annotations = release_record.to_annotations(model_release(plan.model("summarizer").model))
    assert annotations["inference.platform/canary-step-override"] == "incident 42: roll forward"
    # Each version's weights, as its source names them.
    assert annotations["inference.platform/stable-weights"] == f"hf://Qwen/Qwen2.5-0.5B-Instruct@{STAGING_V1_SHA}"
    assert annotations["inference.platform/canary-weights"] == f"hf://Qwen/Qwen2.5-1.5B-Instruct@{STAGING_V2_SHA}"


def test_canary_releases_output_is_what_the_policy_config_takes(staging_raw):
    plan = validate(staging_raw)
    releases = canary_releases(plan.routes)
    assert releases["summarizer"] == {
        "stable": "v1",
        "canary": "v2",
        "canaryWeight": 10,
        "steps": [10, 25, 50, 100],
        **SERVED,
        "adapters": {},
    }
    assert releases["labeller"]["canary"] is None
    # The same, read back from the stack's outputs by CI.
    assert as_output(previous.from_outputs({"canaryReleases": releases, "clusterName": "x"})) == releases


# --- where the previous releases come from ------------------------------------------------------


def test_previous_releases_from_a_baseline_preview(staging):
    releases = previous.previous_releases(staging.resources, None)
    assert releases is not None
    assert release_record.to_output(releases["summarizer"]) == {
        "stable": "v1",
        "canary": "v2",
        "canaryWeight": 10,
        "steps": [10, 25, 50, 100],
        **SERVED,
        "adapters": {},
    }
    # A baseline from before the routes declared their release says nothing.
    old = [r for r in staging.resources if r["type"] != VIRTUAL_SERVICE]
    assert previous.previous_releases(old, None) is None
    assert previous.previous_releases(None, None) is None


def test_previous_releases_from_an_older_stack_file(tmp_path):
    models = [
        {"name": "chat", "release": {"stable": "v1", "canary": "v2", "weights": {"v1": 75, "v2": 25}}},
        {"name": "embed", "release": {"stable": "v3"}},
        {"name": "odd", "release": "not a release"},
        "not a model",
    ]
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(yaml.safe_dump({"config": {"inference-platform:models": models}}))
    assert previous.previous_releases(None, path) == {
        # No steps in the file: the config's defaults, which the program applied; no adapters; no weights known.
        "chat": release_record.Release("v1", "v2", 25, (10, 25, 50, 100), adapters={}),
        "embed": release_record.Release("v3", None, 0, (10, 25, 50, 100), adapters={}),
    }


def test_a_stack_file_without_models_is_an_input_error(tmp_path):
    from preview.stack_config import StackConfigError

    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text("config:\n  aws:region: us-east-1\n")
    with pytest.raises(StackConfigError, match="no `config: inference-platform:models` list"):
        previous.previous_releases(None, path)


def test_previous_releases_go_to_both_policies_unless_the_user_set_them():
    releases = {"chat": release_record.Release("v1", steps=(25, 100), stable_weights="hf://org/m@" + "a" * 40)}
    merged = previous.with_previous_releases({"canary-weight-steps": "advisory"}, releases)
    # In the output form (platform_config/release.py to_output), which the pack's schema takes.
    written = {
        "chat": {"stable": "v1", "canary": None, "canaryWeight": 0, "steps": [25, 100], "stableWeights": "hf://org/m@" + "a" * 40}
    }
    assert merged["canary-weight-steps"] == {"enforcementLevel": "advisory", "previousReleases": written}
    assert merged["canary-step-override"] == {"previousReleases": written}
    mine: dict[str, Any] = {"canary-weight-steps": {"previousReleases": {}}}
    assert previous.with_previous_releases(mine, releases)["canary-weight-steps"] == {"previousReleases": {}}
    assert previous.with_previous_releases(mine, None) is mine


def test_ci_writes_the_policy_config_from_the_stack_outputs(tmp_path):
    import subprocess

    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"canaryReleases": {"chat": {"stable": "v1", "canary": "v2", "canaryWeight": 10}}}))
    run = [sys.executable, "-m", "preview.previous_releases", "--from-outputs", str(outputs)]
    result = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, check=True)
    config = json.loads(result.stdout)
    assert config["canary-weight-steps"]["previousReleases"]["chat"]["canaryWeight"] == 10
    # Before the stack's first deployment with the rule: nothing to compare.
    outputs.write_text(json.dumps({"clusterName": "x"}))
    assert json.loads(subprocess.run(run, cwd=ROOT, capture_output=True, text=True, check=True).stdout) == {}
    outputs.write_text(json.dumps({"canaryReleases": {"chat": {"canaryWeight": 10}}}))
    refused = subprocess.run(run, cwd=ROOT, capture_output=True, text=True)
    assert refused.returncode == 2 and "canaryReleases.chat is not a release" in refused.stderr


# --- the pack end to end ------------------------------------------------------------------------


def _release(stable: str, canary_version: str | None = None, weight: int = 0, reason: str | None = None) -> dict[str, Any]:
    release: dict[str, Any] = {"stable": stable}
    if canary_version is not None:
        release.update(canary=canary_version, canaryWeight=weight)
    if reason is not None:
        release["stepOverride"] = {"reason": reason}
    return release


@pytest.mark.slow
@pytest.mark.parametrize(
    "before, after, exit_code, message",
    [
        (_release("v1", "v2", 10), _release("v1", "v2", 25), 0, None),
        (_release("v1", "v2", 10), _release("v1", "v2", 50), 1, "weight 10% -> 50% skips steps: the next allowed step is 25%"),
        (_release("v1", "v2", 10), _release("v1", "v2", 50, "incident 42: hotfix roll-forward"), 0, None),
        (_release("v1", "v2", 50), _release("v2"), 1, "canary v2 promoted to stable at 50%"),
    ],
    # The rule's other cases (promotion at 100, rollback, a new canary) are the table above: one
    # preview each here would add seconds, not coverage of the path through the pack.
    ids=["10-to-25", "10-to-50", "10-to-50-overridden", "promoted-at-50"],
)  # fmt: skip
def test_the_pack_holds_the_release_to_the_previous_one(tmp_path, staging_raw, before, after, exit_code, message):
    set_at(staging_raw, ("models", 0, "release"), after)
    # A canary above 10% holds more servers at peak: keep them within the tenant's quota.
    set_at(staging_raw, ("models", 0, "autoscaling", "maxReplicas"), 4)
    stack = write_stack(tmp_path, staging_raw, {"aws:region": "us-east-1"})
    config = tmp_path / "policy-config.json"
    config.write_text(
        json.dumps(previous.with_previous_releases({}, {"summarizer": release_record.from_output(before, "before")}))
    )
    out = tmp_path / "out"
    result = run_preview("--stack", "test", "--config-file", str(stack), "--out", str(out), "--policy-config", str(config))
    assert result.returncode == exit_code, result.stdout + result.stderr
    diagnostics = json.loads((out / "report.json").read_text())["policies"]["data"]["diagnostics"]
    steps = [d for d in diagnostics if d["policy"] == "canary-weight-steps"]
    if message is None:
        assert steps == []
    else:
        (violation,) = steps
        assert violation["level"] == "mandatory" and message in violation["message"], violation
        (line,) = [line for line in result.stdout.splitlines() if "MANDATORY canary-weight-steps" in line]
        assert "VirtualService team-a/summarizer: model summarizer" in line and message in line
    overridden = [d for d in diagnostics if d["policy"] == "canary-step-override"]
    if after.get("stepOverride"):
        (record,) = overridden
        assert record["level"] == "advisory" and "incident 42: hotfix roll-forward" in record["message"]
    else:
        assert overridden == []


def test_a_change_cannot_loosen_the_steps_it_is_held_to_when_the_previous_file_names_none(tmp_path):
    """The committed stacks rely on the default steps: a pull request writing `steps: [100]` and
    weight 100 is held to the defaults the deployed release has."""
    models = [{"name": "chat", "release": {"stable": "v1", "canary": "v2", "canaryWeight": 10}}]
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(yaml.safe_dump({"config": {"inference-platform:models": models}}))
    releases = previous.previous_releases(None, path)
    assert releases is not None
    entry = releases["chat"]
    before = Release(entry.stable, entry.canary, entry.canary_weight, steps=entry.steps)
    message = step_violation("chat", before, Release("v1", "v2", 100, steps=(100,)))
    assert message is not None and "the next allowed step is 25%" in message


def test_new_weights_under_a_version_name_are_a_release_too():
    """A moved registry alias (or an edited revision) changes what a version serves without
    renaming it: on the stable version it needs the steps (or a reason), on the canary it starts
    the canary again, and a promotion must serve what the canary was judged on."""
    a, b = "hf://org/m@" + "a" * 40, "hf://org/m@" + "b" * 40
    before = Release("v1", "v2", 25, STEPS, stable_weights=a, canary_weights=b)
    moved_stable = step_violation("chat", before, Release("v1", "v2", 25, STEPS, stable_weights=b, canary_weights=b))
    assert moved_stable is not None and f"stable version v1 now serves {b} instead of {a}" in moved_stable
    # The canary's weights moved: it is a new canary, back at the first step at most.
    assert step_violation("chat", before, Release("v1", "v2", 25, STEPS, stable_weights=a, canary_weights=a)) is not None
    assert step_violation("chat", before, Release("v1", "v2", 10, STEPS, stable_weights=a, canary_weights=a)) is None
    # Promoted at 100 with the weights it was judged on; not with others.
    at_100 = Release("v1", "v2", 100, STEPS, stable_weights=a, canary_weights=b)
    assert step_violation("chat", at_100, Release("v2", None, 0, STEPS, stable_weights=b)) is None
    swapped = step_violation("chat", at_100, Release("v2", None, 0, STEPS, stable_weights=a))
    assert swapped is not None and "not the " + b in swapped
    # Unknown weights on either side (a registry alias in a previous stack file): nothing to compare.
    assert step_violation("chat", Release("v1", None, 0, STEPS), Release("v1", None, 0, STEPS, stable_weights=b)) is None


def test_a_previous_stack_file_names_the_weights_its_pinned_sources_serve(tmp_path):
    models = [
        {
            "name": "chat",
            "versions": [
                {"name": "v1", "source": {"huggingface": "org/m", "revision": "a" * 40}},
                {"name": "v2", "source": {"mlflow": {"model": "chat", "alias": "challenger"}}},
            ],
            "release": {"stable": "v1", "canary": "v2", "canaryWeight": 10},
        }
    ]
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(yaml.safe_dump({"config": {"inference-platform:models": models}}))
    releases = previous.previous_releases(None, path)
    assert releases is not None
    # The registry reference is resolved by the registry only: no weights recorded for v2.
    assert releases["chat"].stable_weights == "hf://org/m@" + "a" * 40 and releases["chat"].canary_weights is None


def test_a_step_override_covers_one_change_only():
    """The reason the previous change was deployed with does not let the next one skip steps."""
    props = released("v1", "v2", 100, override="incident 42: roll forward")
    entry = {"stable": "v1", "canary": "v2", "canaryWeight": 25, "stepOverride": "incident 42: roll forward"}
    (found,) = violations(canary.canary_weight_steps, props, {"previousReleases": {"chat": entry}})
    assert "25% -> 100% skips steps" in found and "was the previous change's: write this change's own reason" in found
    # A new reason is this change's own: allowed (and reported by the advisory policy).
    entry["stepOverride"] = "incident 41: the first fix"
    assert violations(canary.canary_weight_steps, props, {"previousReleases": {"chat": entry}}) == []
