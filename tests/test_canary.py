"""`python -m platform_tools canary`: the verdict from a real Prometheus holding synthetic series
of a healthy, a slow, an erroring, a shedding, a barely used and a lone canary (each in its own
hour of the same TSDB, tests/canary_series.py), and the step it writes into the stack file. Steps by
hand and the stack edits: tests/test_canary_steps.py; the verdict's rules and bad input:
tests/test_canary_verdict.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components.specs.routes import model_release
from platform_config.loader import parse_platform_config
from platform_config.release import to_output
from platform_tools.__main__ import canary_target, load_platform, main
from platform_tools.canary import Target, read_metrics
from platform_tools.canary_verdict import verdict
from preview.stack_config import load_project

from .canary_helpers import PROD_RELEASE, _changed_lines, _run, _stack, _step
from .canary_series import APP, AT, NAMESPACE, SERVED, synthetic
from .helpers import ROOT, raw_stack, stack_file
from .servers.prometheus import prometheus_with


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory) -> Iterator[str]:
    with prometheus_with(synthetic(), tmp_path_factory.mktemp("prometheus")) as url:
        yield url


def _canary(capsys, prometheus: str, path: Path, scenario: str, *extra: str) -> dict[str, Any]:
    code, out, err = _run(
        capsys,
        "prod",
        "llama-8b",
        "--prometheus",
        prometheus,
        "--stack-file",
        str(path),
        "--at",
        str(AT[scenario]),
        "--json",
        *extra,
    )
    assert code == 0, err
    return json.loads(out)


@pytest.mark.real_server
def test_the_queries_read_each_versions_numbers_and_nothing_else(prometheus):
    metrics = read_metrics(prometheus, Target(NAMESPACE, APP, SERVED, "v1", "v2"), "30m", AT["healthy"])
    stable, canary = metrics.stable, metrics.canary
    window = 30 * 60
    assert stable.total.requests == pytest.approx(3.0 * window)
    assert canary.total.requests == pytest.approx(0.5 * window)
    assert {t: round(x.requests) for t, x in canary.tiers.items()} == {"premium": 0.2 * window, "standard": 0.3 * window}
    assert stable.total.error_rate == pytest.approx(0.002)
    assert canary.total.error_rate == pytest.approx(0.004)
    assert canary.total.shed_rate == pytest.approx(0.01)
    assert stable.ttft_p95_ms == pytest.approx(175) and canary.ttft_p95_ms == pytest.approx(175)
    assert stable.e2e_p95_ms == pytest.approx(1750) and canary.e2e_p95_ms_by_tier == {
        "premium": pytest.approx(1750),
        "standard": pytest.approx(1750),
    }


def _picked() -> Target:
    """prod's llama-8b served by Deployments (`autoscaling.mode: hpa`), so each version has an endpoint picker: what
    the verdict selects for it, from the code (`canary_target`)."""
    raw = raw_stack("prod")
    model = next(m for m in raw["models"] if m["name"] == APP)
    model["autoscaling"] = {"mode": "hpa", "minReplicas": 2, "maxReplicas": 10, "hpa": {"queueDepthTarget": 5}}
    config = parse_platform_config(raw)
    return canary_target(config, next(m for m in config.models if m.name == APP))


PICKED = _picked()


def test_a_picked_versions_target_names_its_pickers_deployments():
    assert PICKED.picker_workloads == {f"{APP}-v1-epp": "v1", f"{APP}-v2-epp": "v2"}


@pytest.mark.real_server
def test_requests_the_canarys_picker_shed_count_as_its_503s_in_their_tier(prometheus):
    metrics = read_metrics(prometheus, PICKED, "30m", AT["picker-shedding"])
    window = 30 * 60
    stable, canary = metrics.stable, metrics.canary
    # The stable picker sheds nothing: its figures are the pods' alone.
    assert stable.picker_shed == 0 and stable.total.requests == pytest.approx(3.0 * window)
    assert canary.picker_shed == pytest.approx(0.07 * window)
    assert canary.total.requests == pytest.approx((0.5 + 0.07) * window)
    assert canary.total.shed == pytest.approx((0.5 * 0.01 + 0.07) * window)
    assert canary.tiers["premium"].shed == pytest.approx((0.2 * 0.01 + 0.02) * window)
    assert canary.tiers["standard"].requests == pytest.approx((0.3 + 0.05) * window)
    # Without pickers (a Knative-served version) the same hour reads the pods alone.
    alone = read_metrics(prometheus, Target(NAMESPACE, APP, SERVED, "v1", "v2"), "30m", AT["picker-shedding"])
    assert alone.canary.total.requests == pytest.approx(0.5 * window) and alone.canary.picker_shed == 0


@pytest.mark.real_server
def test_a_canary_whose_picker_sheds_is_rolled_back_though_its_pods_answer_well(prometheus):
    analysis = _prod_model("llama-8b").release.analysis
    pods_only = verdict(
        read_metrics(prometheus, Target(NAMESPACE, APP, SERVED, "v1", "v2"), "30m", AT["picker-shedding"]), analysis, 500, 10
    )
    assert pods_only.action == "promote"
    decision = verdict(read_metrics(prometheus, PICKED, "30m", AT["picker-shedding"]), analysis, 500, 10)
    assert decision.action == "rollback"
    assert "all tiers: canary 503 rate 13.16% > 5.00% and > stable's 1.00%" in decision.reasons, decision.reasons
    assert any(r.startswith("standard: canary 503 rate") for r in decision.reasons)


def _prod_model(name: str, stack: str = "prod") -> Any:
    config = load_platform(load_project(ROOT), stack, stack_file(stack))
    return next(m for m in config.models if m.name == name)


@pytest.mark.real_server
def test_a_healthy_canary_is_promoted_one_step_and_only_its_weight_line_changes(prometheus, capsys, tmp_path):
    path = _stack(tmp_path)
    before = path.read_text()
    result = _canary(capsys, prometheus, path, "healthy", "--write")
    assert result["verdict"] == "promote" and result["written"]
    assert result["nextStep"]["canaryWeight"] == 25
    assert _changed_lines(before, path.read_text()) == ["-         canaryWeight: 10", "+         canaryWeight: 25"]


@pytest.mark.real_server
def test_a_hold_by_hand_keeps_a_healthy_canary_where_it_is_until_a_person_promotes_it(prometheus, capsys, tmp_path):
    path = _stack(tmp_path)
    before = path.read_text()
    reason = "TTFT regression under investigation (INC-42)"
    code, out, _ = _step(capsys, path, "hold", "--reason", reason, "--write")
    assert code == 0 and out.startswith("llama-8b: hold by hand: no change (canary weight stays 10); hold: ")
    held = path.read_text()
    assert _changed_lines(before, held) == [f'+         hold: "{reason}"']
    # The metrics say promote; a person said hold: nothing is written, and the reason is the first one given.
    result = _canary(capsys, prometheus, path, "healthy", "--write")
    assert result["verdict"] == "hold" and not result["written"] and path.read_text() == held
    assert result["reasons"][0] == f"held by hand: {reason} (the metrics alone say promote; `step` promotes or rolls back)"
    # The canary workflow leaves it out.
    assert main(["canaries", "prod", "--stack-file", str(path), "--project-dir", str(ROOT)]) == 0
    assert "llama-8b" not in capsys.readouterr().out.split()
    # A person promotes it one step; the hold goes with that change.
    code, out, _ = _step(capsys, path, "promote", "--write")
    assert code == 0 and "canary weight 10 -> 25; the hold" in out
    assert _changed_lines(before, path.read_text()) == ["-         canaryWeight: 10", "+         canaryWeight: 25"]


@pytest.mark.real_server
def test_a_release_whose_steps_the_quotas_cannot_hold_is_refused_before_any_query(prometheus, capsys, tmp_path):
    # At 20 replicas the 10% canary fits, its 50/50 step does not: refused as declared, not half-way.
    path = _stack(tmp_path, max_replicas=20)
    before = path.read_bytes()
    code, out, err = _run(
        capsys, "prod", "llama-8b", "--prometheus", prometheus, "--stack-file", str(path), "--at", str(AT["healthy"]), "--write"
    )
    assert (code, out) == (2, "") and path.read_bytes() == before
    assert "tenants[0].quota.cpu" in err and "maxReplicas=20" in err


@pytest.mark.real_server
def test_the_text_report_shows_each_number_beside_its_limit(prometheus, capsys, tmp_path):
    code, out, _ = _run(
        capsys, "prod", "llama-8b", "--prometheus", prometheus, "--stack-file", str(_stack(tmp_path)), "--at", str(AT["slow"])
    )
    assert code == 0
    assert "TTFT p95 (vLLM, no tier)  all tiers  175 ms" in out and "375 ms" in out and "<= 1.2 x stable = 210 ms" in out
    verdict_line = "\nverdict: ROLLBACK: canary weight 10 -> 0\n"
    assert verdict_line + "  - all tiers: canary TTFT p95 (vLLM, no tier) 375 ms > 1.2 x stable's 175 ms\n" in out


@pytest.mark.real_server
def test_at_100_a_healthy_canary_becomes_stable_and_its_entries_go(prometheus, capsys, tmp_path):
    release = (
        "      release:\n        stable: v1\n        # v2 takes everything while we watch it.\n        canary: v2\n"
        "        canaryWeight: 100\n        stepOverride:\n          reason: incident 4711 hotfix, straight to 100\n"
        "        overrideHeader: x-model-version\n"
    )
    path = _stack(tmp_path, release)
    before = path.read_text()
    result = _canary(capsys, prometheus, path, "alone", "--write")
    assert result["verdict"] == "promote", result["reasons"]
    assert result["nextStep"] == {**result["nextStep"], "canaryWeight": None, "stable": "v2"}
    assert _changed_lines(before, path.read_text()) == [
        "-         stable: v1",
        "+         stable: v2",
        "-         canary: v2",
        "-         canaryWeight: 100",
        "-         stepOverride:",
        "-           reason: incident 4711 hotfix, straight to 100",
    ]
    assert "        # v2 takes everything while we watch it.\n        overrideHeader" in path.read_text()


@pytest.mark.real_server
def test_a_slow_canary_is_rolled_back_to_weight_zero(prometheus, capsys, tmp_path):
    path = _stack(tmp_path)
    before = path.read_text()
    result = _canary(capsys, prometheus, path, "slow", "--write")
    assert result["verdict"] == "rollback"
    assert "all tiers: canary TTFT p95 (vLLM, no tier) 375 ms > 1.2 x stable's 175 ms" in result["reasons"]
    assert any(r.startswith("premium: canary e2e p95 3750 ms") for r in result["reasons"])
    assert _changed_lines(before, path.read_text()) == ["-         canaryWeight: 10", "+         canaryWeight: 0"]


@pytest.mark.real_server
@pytest.mark.parametrize(
    ("scenario", "reason"),
    [
        ("erroring", "all tiers: canary 5xx rate (not 503) 5.00% > 1.00% and > stable's 0.20%"),
        ("shedding", "all tiers: canary 503 rate 10.00% > 5.00%"),
    ],
)
def test_an_erroring_or_shedding_canary_is_rolled_back(prometheus, capsys, tmp_path, scenario, reason):
    result = _canary(capsys, prometheus, _stack(tmp_path), scenario)
    assert result["verdict"] == "rollback"
    assert any(r.startswith(reason) for r in result["reasons"]), result["reasons"]
    # Shed answers are quick; the latency figures count answered requests only.
    assert result["metrics"]["canary"]["e2e_p95_ms"] == pytest.approx(1750)


@pytest.mark.real_server
def test_too_little_canary_traffic_holds_and_writes_nothing(prometheus, capsys, tmp_path):
    path = _stack(tmp_path)
    before = path.read_bytes()
    result = _canary(capsys, prometheus, path, "little", "--write")
    assert result["verdict"] == "hold" and not result["written"]
    assert result["reasons"] == ["too few requests in 30m: stable 5400, canary 270, need 300"]
    assert path.read_bytes() == before


@pytest.mark.real_server
def test_a_weights_map_moves_both_entries(prometheus, capsys, tmp_path):
    release = (
        "      release:\n        stable: v1\n        canary: v2\n        weights:\n          v1: 90  # stable\n          v2: 10\n"
    )
    path = _stack(tmp_path, release)
    before = path.read_text()
    assert _canary(capsys, prometheus, path, "healthy", "--write")["written"]
    assert sorted(_changed_lines(before, path.read_text())) == [
        "+           v1: 75  # stable",
        "+           v2: 25",
        "-           v1: 90  # stable",
        "-           v2: 10",
    ]


def _deployed(tmp_path: Path, stack: Path) -> Path:
    """The stack outputs `pulumi stack output --json` gives once `stack` is deployed: the
    program's own `canaryReleases` for it (and another output beside it)."""
    config = load_platform(load_project(ROOT), "prod", stack)
    outputs = {"canaryReleases": {m.name: to_output(model_release(m)) for m in config.models}, "gatewayHost": "api.example.com"}
    path = tmp_path / f"outputs-{stack.stem}-{len(list(tmp_path.iterdir()))}.json"
    path.write_text(json.dumps(outputs))
    return path


@pytest.mark.real_server
def test_a_step_that_runs_is_judged(prometheus, capsys, tmp_path):
    path = _stack(tmp_path)
    result = _canary(capsys, prometheus, path, "healthy", "--write", "--deployed", str(_deployed(tmp_path, path)))
    assert result["verdict"] == "promote" and result["written"]


@pytest.mark.real_server
def test_a_merged_step_not_yet_deployed_waits_and_writes_nothing(prometheus, capsys, tmp_path):
    # Deployed at 10%; the stack file already says 25% (the last verdict's pull request was
    # merged, `pulumi up` has not run): the metrics are still those of 10%.
    deployed = _deployed(tmp_path, _stack(tmp_path))
    path = _stack(tmp_path, PROD_RELEASE.replace("canaryWeight: 10", "canaryWeight: 25"))
    before = path.read_bytes()
    result = _canary(capsys, prometheus, path, "healthy", "--write", "--deployed", str(deployed))
    assert result["verdict"] == "wait" and not result["written"]
    assert result["reasons"] == [
        "the stack file's release is not deployed yet (canaryWeight 25 in the stack file, 10 deployed): judge it once it runs"
    ]
    assert path.read_bytes() == before


@pytest.mark.real_server
def test_the_local_try_out_runs_every_scenario(capsys):
    """`make canary-try` (tests/canary_tryout.py): the tool's verdicts against the real Prometheus, on a copy of the
    prod stack file; the project's own is never written."""
    from .canary_tryout import main as try_out

    before = stack_file("prod").read_text()
    assert try_out([]) == 0
    out = capsys.readouterr().out
    for scenario, expected in (("healthy", "PROMOTE"), ("slow", "ROLLBACK"), ("little", "HOLD"), ("picker-shedding", "ROLLBACK")):
        section = out.split(f"# scenario {scenario!r}\n", 1)[1].split("# scenario", 1)[0]
        assert f"verdict: {expected}:" in section, (scenario, section)
    assert stack_file("prod").read_text() == before
