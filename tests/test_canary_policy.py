"""Policy canary-weight-steps: a canary's weight rises one configured step per change, and it
becomes stable only from the last step, unless the release's step override gives a reason; held
to the previous releases the policy config hands the pack (issue 14).

The rule as a pure function and as a validator with a collecting report_violation; where the
previous releases come from (a baseline preview, a previous stack file, the stack's outputs);
what the program records on each model's route; and the whole pack through the analyzer
protocol, run by the offline preview on a stack file."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from components.model_route import canary_releases
from components.specs.routes import model_release
from platform_config import release as release_record
from preview import previous_releases as previous

from .helpers import ROOT, Evaluated, raw_stack, run_preview, set_at, validate, write_stack


def as_output(releases: dict[str, release_record.Release] | None) -> dict[str, Any] | None:
    """Releases read back, in the output form they were read from."""
    return None if releases is None else {name: release_record.to_output(release) for name, release in releases.items()}


def copy_of(raw: dict[str, Any]) -> dict[str, Any]:
    import copy

    return copy.deepcopy(raw)


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
VIRTUAL_SERVICE = "kubernetes:networking.istio.io/v1:VirtualService"


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


def route(name: str = "chat", **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a", "annotations": annotations}, "spec": {}}


def released(stable: str, canary_version: str | None, weight: int, override: str | None = None) -> dict[str, Any]:
    annotations = {
        "inference.platform/stable-version": stable,
        "inference.platform/canary-weight": str(weight),
        "inference.platform/canary-steps": "10,25,50,100",
    }
    if canary_version is not None:
        annotations["inference.platform/canary-version"] = canary_version
    if override is not None:
        annotations["inference.platform/canary-step-override"] = override
    return route(**annotations)


def violations(validator, props: dict[str, Any], config: dict[str, Any] | None, type_: str = VIRTUAL_SERVICE) -> list[str]:
    found: list[str] = []
    args = SimpleNamespace(resource_type=type_, props=props, urn="urn:test", get_config=lambda: config)
    validator(args, lambda message, urn=None: found.append(message))
    return found


PREVIOUS_10 = {"previousReleases": {"chat": {"stable": "v1", "canary": "v2", "canaryWeight": 10}}}


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
