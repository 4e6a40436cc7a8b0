"""`python -m platform_tools step` and `canaries`, and the stack edits a step writes: a person's rollback,
promotion and hold, the release's own steps, flow style, weights maps, anchors, line ends, and what is
left to a person."""

from __future__ import annotations

import json

import pytest
import yaml

from platform_config.models import ReleaseConfig
from platform_tools.__main__ import main, write_step
from platform_tools.canary_verdict import step_taken
from platform_tools.stack_edit import Change, StackEditError, apply_change
from preview.stack_config import load_project

from .canary_helpers import PROD_RELEASE, _changed_lines, _stack, _step
from .helpers import ROOT


def test_a_person_rolls_back_or_promotes_without_prometheus(capsys, tmp_path):
    path = _stack(tmp_path)
    before = path.read_text()
    # Without --write it only says what it would do.
    code, out, _ = _step(capsys, path, "rollback")
    assert code == 0 and out.strip() == "llama-8b: rollback by hand: canary weight 10 -> 0" and path.read_text() == before
    code, out, _ = _step(capsys, path, "rollback", "--write", "--json")
    result = json.loads(out)
    assert code == 0 and result["written"] and result["canaryWeight"] == 0 and result["stable"] == "v1"
    assert _changed_lines(before, path.read_text()) == ["-         canaryWeight: 10", "+         canaryWeight: 0"]
    # From 0 a promotion is the first step again.
    code, out, _ = _step(capsys, path, "promote", "--write")
    assert code == 0 and out.startswith("llama-8b: promote by hand: canary weight 0 -> 10") and path.read_text() == before


@pytest.mark.parametrize(
    "args, message",
    [
        (("hold",), "--reason: hold needs why, 10 to 500 characters"),
        (("hold", "--reason", "too short"), "--reason: hold needs why, 10 to 500 characters"),
        (("rollback", "--reason", "a reason long enough"), "--reason: only hold records one"),
    ],
    ids=["hold-without-reason", "short-reason", "reason-on-rollback"],
)
def test_a_step_by_hand_needs_what_it_writes(capsys, tmp_path, args, message):
    path = _stack(tmp_path)
    before = path.read_text()
    code, out, err = _step(capsys, path, *args, "--write")
    assert code == 2 and err.startswith(f"error: {message}") and "Traceback" not in err and path.read_text() == before


def test_an_edit_the_stack_would_refuse_is_not_written(tmp_path):
    path = _stack(tmp_path)
    before = path.read_bytes()
    project = load_project(ROOT)
    # 30 is no step of the release: the edited stack does not validate, so nothing is written.
    with pytest.raises(StackEditError, match="the edited stack would not validate, nothing written: .*not a step"):
        write_step(project, "prod", path, Change("llama-8b", "v1", "v2", 30))
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == [path.name]


def test_a_flow_style_release_is_rewritten_entry_by_entry():
    text = "config:\n  inference-platform:models:\n    - name: m\n"
    text += "      release: {stable: v1, canary: v2, canaryWeight: 25}  # note\n"
    step = apply_change(text, "inference-platform", Change("m", "v1", "v2", 50))
    assert step.splitlines()[-1] == "      release: {stable: v1, canary: v2, canaryWeight: 50}  # note"
    promoted = apply_change(text, "inference-platform", Change("m", "v1", "v2", None))
    assert promoted.splitlines()[-1] == "      release: {stable: v2}  # note"
    # A hold is written entry by entry too, replaced by another, and removed by the next step.
    held = apply_change(text, "inference-platform", Change("m", "v1", "v2", 25, "a person looks into it"))
    assert (
        held.splitlines()[-1]
        == '      release: {stable: v1, canary: v2, canaryWeight: 25, hold: "a person looks into it"}  # note'
    )
    again = apply_change(held, "inference-platform", Change("m", "v1", "v2", 25, "another reason, longer"))
    assert again.splitlines()[-1].endswith('hold: "another reason, longer"}  # note')
    assert apply_change(held, "inference-platform", Change("m", "v1", "v2", 50)) == step


def test_an_edit_that_would_change_another_model_through_an_anchor_is_refused():
    text = (
        "config:\n  inference-platform:models:\n    - name: a\n      release: &r\n        stable: v1\n        canary: v2\n"
        "        canaryWeight: 10\n    - name: b\n      release: *r\n"
    )
    with pytest.raises(StackEditError, match="more than the release of 'a'"):
        apply_change(text, "inference-platform", Change("a", "v1", "v2", 25))


def test_the_next_step_comes_from_the_releases_own_steps():
    release = ReleaseConfig(stable="v1", canary="v2", canary_weight=50, steps=[10, 50, 100])
    assert step_taken(release, "promote").new_weight == 100
    assert step_taken(release, "rollback").new_weight == 0
    assert step_taken(release, "hold").changes is False
    # From the last step, the canary becomes the stable version.
    last = ReleaseConfig(stable="v1", canary="v2", canary_weight=100, steps=[10, 50, 100])
    assert step_taken(last, "promote").new_weight is None


def test_promotion_removes_a_weights_block_and_a_missing_weight_is_inserted_under_the_canary():
    head = (
        "config:\n  inference-platform:models:\n    - name: m\n      release:\n        stable: v1  # keep\n        canary: v2\n"
    )
    weights = (
        head + "        weights:\n          v1: 0\n          v2: 100\n        # the split above\n        userKeyHeader: x-user\n"
    )
    promoted = apply_change(weights, "inference-platform", Change("m", "v1", "v2", None))
    assert promoted == head.replace("stable: v1  # keep\n        canary: v2\n", "stable: v2  # keep\n") + (
        "        # the split above\n        userKeyHeader: x-user\n"
    )
    assert apply_change(head, "inference-platform", Change("m", "v1", "v2", 10)) == head + "        canaryWeight: 10\n"


def test_canaries_lists_the_models_with_a_canary_for_the_workflow(capsys, tmp_path):
    stack = _stack(tmp_path)
    assert main(["canaries", "prod", "--stack-file", str(stack), "--project-dir", str(ROOT)]) == 0
    out = capsys.readouterr().out.split()
    raw = yaml.safe_load(stack.read_text())["config"]["inference-platform:models"]
    assert out == [m["name"] for m in raw if m.get("release", {}).get("canary")] and out
    # Rolled back to 0: it waits for a person, the workflow does not judge it again.
    rolled_back = _stack(tmp_path, PROD_RELEASE.replace("canaryWeight: 10", "canaryWeight: 0"))
    assert main(["canaries", "prod", "--stack-file", str(rolled_back), "--project-dir", str(ROOT)]) == 0
    assert capsys.readouterr().out == ""
    assert main(["canaries", "no/such", "--project-dir", str(ROOT)]) == 2


EDGE_STACK = """config:
  inference-platform:models:
    - name: m
      release:
        stable: v1
        canary: {canary}
        canaryWeight: 100
        stepOverride:
          reason: >
            a hotfix for an incident,
            over two lines
      # the model's autoscaling follows
      autoscaling: {{mode: hpa}}
"""


def test_promotion_removes_a_multi_line_step_override_and_keeps_what_follows():
    text = EDGE_STACK.format(canary="v2")
    promoted = apply_change(text, "inference-platform", Change("m", "v1", "v2", None))
    assert _changed_lines(text, promoted) == [
        "-         stable: v1",
        "+         stable: v2",
        "-         canary: v2",
        "-         canaryWeight: 100",
        "-         stepOverride:",
        "-           reason: >",
        "-             a hotfix for an incident,",
        "-             over two lines",
    ]


def test_a_version_name_yaml_reads_as_another_type_is_written_quoted():
    # `on` is a DNS label (a valid version name) that YAML 1.1 reads as true.
    text = EDGE_STACK.format(canary="'on'")
    promoted = apply_change(text, "inference-platform", Change("m", "v1", "on", None))
    assert yaml.safe_load(promoted)["config"]["inference-platform:models"][0]["release"] == {"stable": "on"}


def test_a_crlf_file_keeps_its_line_ends_when_a_weight_is_inserted():
    text = "config:\n  inference-platform:models:\n    - name: m\n      release:\n        stable: v1\n        canary: v2\n"
    crlf = text.replace("\n", "\r\n")
    stepped = apply_change(crlf, "inference-platform", Change("m", "v1", "v2", 10))
    assert stepped == crlf + "        canaryWeight: 10\r\n"


def test_a_flow_style_release_with_comments_is_left_to_a_person():
    text = (
        "config:\n  inference-platform:models:\n    - name: m\n"
        "      release: {stable: v1,  # why\n        canary: v2, canaryWeight: 10}\n"
    )
    with pytest.raises(StackEditError, match="holds comments, which rewriting it would drop"):
        apply_change(text, "inference-platform", Change("m", "v1", "v2", 25))


def test_a_hold_needs_a_canary_and_a_reason():
    from .helpers import config_problems, raw_stack

    raw = raw_stack("prod")
    raw["models"][0]["release"]["hold"] = "nothing to hold here at all"  # the 70B runs no canary
    (problem,) = config_problems(raw)
    assert problem.startswith("inference-platform:models[0].release: ") and "'hold' holds a canary" in problem
    raw = raw_stack("prod")
    raw["models"][1]["release"]["hold"] = "short"
    (problem,) = config_problems(raw)
    assert problem.startswith("inference-platform:models[1].release.hold: ")
