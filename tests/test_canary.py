"""`python -m platform_tools canary`: the verdict from a real Prometheus holding synthetic series
of a healthy, a slow, an erroring, a shedding, a barely used and a lone canary (each in its own
hour of the same TSDB), and the step it writes into the stack file."""

from __future__ import annotations

import difflib
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.specs.routes import model_release
from platform_config.loader import parse_platform_config
from platform_config.models import CanaryAnalysis, ReleaseConfig
from platform_config.release import to_output
from platform_tools.__main__ import canary_target, load_platform, main, write_step
from platform_tools.canary import CanaryMetrics, Target, Traffic, VersionMetrics, queries, read_metrics
from platform_tools.canary_verdict import step_taken, verdict
from platform_tools.stack_edit import Change, StackEditError, apply_change
from preview.stack_config import load_project

from .helpers import ROOT, mirror_show, raw_stack, stack_file
from .servers.prometheus import SyntheticSeries, prometheus_with, two_buckets

NAMESPACE, APP, SERVED = "serving", "llama-8b", "llama-3.1-8b-instruct"
# vLLM 0.18.0's TTFT buckets (vllm/v1/metrics/loggers.py PrometheusStatLogger in its source release,
# held to it by tests/test_vllm_metrics.py); the Istio ones are any.
TTFT_BOUNDS = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
]  # fmt: skip
E2E_BOUNDS: list[float] = [1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000]
FAST_TTFT, SLOW_TTFT = two_buckets(0.1, 0.25), two_buckets(0.25, 0.5)  # p95 175 ms, 375 ms
FAST_E2E, SLOW_E2E = two_buckets(1000, 2500), two_buckets(2500, 5000)  # p95 1750 ms, 3750 ms

# Every scenario ends on its own hour, hours before now (backfilled data must lie in the past).
HOUR = 3600
END = (int(__import__("time").time()) // HOUR - 3) * HOUR
SCENARIOS = ("healthy", "slow", "erroring", "shedding", "little", "alone", "picker-shedding")
AT = {name: END - index * HOUR for index, name in enumerate(SCENARIOS)}

# (requests per second by tier, share of 500s, share of 503s, TTFT, e2e) of each version.
VersionShape = tuple[dict[str, float], float, float, Callable[[float], float], Callable[[float], float]]
STABLE: VersionShape = ({"premium": 1.0, "standard": 2.0}, 0.002, 0.01, FAST_TTFT, FAST_E2E)
CANARY: VersionShape = ({"premium": 0.2, "standard": 0.3}, 0.004, 0.01, FAST_TTFT, FAST_E2E)
SHAPES: dict[str, dict[str, VersionShape]] = {
    "healthy": {"v1": STABLE, "v2": CANARY},
    "slow": {"v1": STABLE, "v2": (CANARY[0], 0.004, 0.01, SLOW_TTFT, SLOW_E2E)},
    "erroring": {"v1": STABLE, "v2": (CANARY[0], 0.05, 0.01, FAST_TTFT, FAST_E2E)},
    "shedding": {"v1": STABLE, "v2": (CANARY[0], 0.004, 0.10, FAST_TTFT, FAST_E2E)},
    "little": {"v1": STABLE, "v2": ({"premium": 0.05, "standard": 0.1}, 0.004, 0.01, FAST_TTFT, FAST_E2E)},
    "alone": {"v2": ({"premium": 1.0, "standard": 2.0}, 0.004, 0.01, FAST_TTFT, FAST_E2E)},
    "picker-shedding": {"v1": STABLE, "v2": CANARY},
}
# Requests per second the canary's picker path refuses in "picker-shedding", by tier: they never
# reach a pod, so only the picker pods' sidecar counts them (429 with a dropped reason).
PICKER_SHED = {"premium": 0.02, "standard": 0.05}


def _istio(app: str, version: str, tier: str, code: str, reporter: str = "destination") -> dict[str, str]:
    return {
        "reporter": reporter,
        "destination_workload_namespace": NAMESPACE,
        "destination_app": app,
        "destination_version": version,
        "destination_workload": f"{app}-{version}",
        "tier": tier,
        "response_code": code,
        "namespace": NAMESPACE,
        "pod": f"{app}-{version}-0",
    }


def _version(data: SyntheticSeries, end: int, version: str, shape: VersionShape, app: str = APP, served: str = SERVED) -> None:
    tiers, errors, shed, ttft, e2e = shape
    start = end - 40 * 60
    for tier, rate in tiers.items():
        for code, share in (("200", 1 - errors - shed), ("500", errors), ("503", shed)):
            data.counter("istio_requests_total", _istio(app, version, tier, code), start, end, rate * share, base=1000)
        data.histogram(
            "istio_request_duration_milliseconds",
            _istio(app, version, tier, "200"),
            E2E_BOUNDS,
            e2e,
            start,
            end,
            rate * (1 - errors - shed),
        )
        # Shed answers come back at once: a p95 counting them would flatter a shedding canary.
        data.histogram(
            "istio_request_duration_milliseconds",
            _istio(app, version, tier, "503"),
            E2E_BOUNDS,
            two_buckets(1, 5),
            start,
            end,
            rate * shed,
        )
        # The gateway's view of the same requests (reporter="source") is never read.
        data.counter("istio_requests_total", _istio(app, version, tier, "500", reporter="source"), start, end, rate, base=10)
    vllm = {"namespace": NAMESPACE, "model_name": served, "model_version": version, "engine": "0", "pod": f"{app}-{version}-0"}
    data.histogram("vllm:time_to_first_token_seconds", vllm, TTFT_BOUNDS, ttft, start, end, sum(tiers.values()))


def _picker(data: SyntheticSeries, end: int, picker: str, tier: str, code: str, rate: float, namespace: str = NAMESPACE) -> None:
    """What the sidecar of a version's picker pods reports: Istio's labels for a Deployment without
    `app`/`version` labels of the model (the picker pods never carry them)."""
    labels = {
        "reporter": "destination",
        "destination_workload_namespace": namespace,
        "destination_app": picker,
        "destination_version": "unknown",
        "destination_workload": picker,
        "tier": tier,
        "response_code": code,
        "namespace": namespace,
        "pod": f"{picker}-0",
    }
    data.counter("istio_requests_total", labels, end - 40 * 60, end, rate, base=100)


def synthetic() -> SyntheticSeries:
    data = SyntheticSeries()
    for name, versions in SHAPES.items():
        for version, shape in versions.items():
            _version(data, AT[name], version, shape)
            picker = f"{APP}-{version}-epp"
            for tier, rate in shape[0].items():
                # The picked requests' answers pass the picker pods too (the servers' 503s among
                # them): the servers' sidecars count those.
                _picker(data, AT[name], picker, tier, "200", rate)
                _picker(data, AT[name], picker, tier, "503", rate / 10)
            # The same picker name in another tenant's namespace, refusing everything: never read.
            _picker(data, AT[name], picker, "standard", "429", 5.0, namespace="other-tenant")
        if name == "picker-shedding":
            for tier, rate in PICKER_SHED.items():
                _picker(data, AT[name], f"{APP}-v2-epp", tier, "429", rate)
        # Another model's canary picker, refusing everything: never read.
        _picker(data, AT[name], "llama-1b-v2-epp", "premium", "429", 5.0)
        # Another model of the tenant with the same version names, failing and slow: never read.
        bad = ({"premium": 5.0}, 0.5, 0.3, SLOW_TTFT, SLOW_E2E)
        _version(data, AT[name], "v1", bad, app="llama-1b", served="llama-3.2-1b-instruct")
        _version(data, AT[name], "v2", bad, app="llama-1b", served="llama-3.2-1b-instruct")
    return data


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory) -> Iterator[str]:
    with prometheus_with(synthetic(), tmp_path_factory.mktemp("prometheus")) as url:
        yield url


PROD_RELEASE = (
    "      release:\n        stable: v1\n        canary: v2\n        canaryWeight: 10\n        overrideHeader: x-model-version\n"
)


# The serving tenant's quotas hold prod's llama-8b at 10 replicas through every canary step
# (platform_config/serving.py version_peaks: the heaviest split among the remaining steps).
PROD_MAX_REPLICAS = "        maxReplicas: 10\n"


def _stack(tmp_path: Path, release: str | None = None, max_replicas: int = 10) -> Path:
    """A copy of the prod stack, its llama-8b release block replaced by `release`."""
    text = stack_file("prod").read_text()
    for block in (PROD_RELEASE, PROD_MAX_REPLICAS):
        assert text.count(block) == 1, f"the prod stack's llama-8b changed: update {block!r}"
    text = text.replace(PROD_MAX_REPLICAS, f"        maxReplicas: {max_replicas}\n")
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(text.replace(PROD_RELEASE, release or PROD_RELEASE))
    return path


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["canary", *args, "--project-dir", str(ROOT)])
    out, err = capsys.readouterr()
    return code, out, err


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


def _changed_lines(before: str, after: str) -> list[str]:
    return [line for line in difflib.ndiff(before.splitlines(), after.splitlines()) if line[:1] in "+-"]


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


def test_the_verdict_queries_a_versions_picker_only_where_it_has_one():
    staging = load_platform(load_project(ROOT), "staging", stack_file("staging"))
    summarizer = next(m for m in staging.models if m.name == "summarizer")  # hpa: a picker per version
    target = canary_target(staging, summarizer)
    assert target.picker_workloads == {"summarizer-v1-epp": "v1", "summarizer-v2-epp": "v2"}
    assert "picker_shed" in queries(target, "30m")
    prod = load_platform(load_project(ROOT), "prod", stack_file("prod"))
    knative = canary_target(prod, next(m for m in prod.models if m.name == "llama-8b"))  # kpa: pickers too
    assert knative.picker_workloads == {"llama-8b-v1-epp": "v1", "llama-8b-v2-epp": "v2"}
    assert "picker_shed" in queries(knative, "30m")
    # A model without pickers has none to query.
    unpicked = summarizer.model_copy(update={"endpoint_picker": summarizer.endpoint_picker.model_copy(update={"enabled": False})})
    target = canary_target(staging, unpicked)
    assert target.picker_workloads == {} and "picker_shed" not in queries(target, "30m")


@pytest.mark.real_server
def test_a_healthy_canary_is_promoted_one_step_and_only_its_weight_line_changes(prometheus, capsys, tmp_path):
    path = _stack(tmp_path)
    before = path.read_text()
    result = _canary(capsys, prometheus, path, "healthy", "--write")
    assert result["verdict"] == "promote" and result["written"]
    assert result["nextStep"]["canaryWeight"] == 25
    assert _changed_lines(before, path.read_text()) == ["-         canaryWeight: 10", "+         canaryWeight: 25"]


def _step(capsys, path: Path, *args: str) -> tuple[int, str, str]:
    code = main(["step", "prod", "llama-8b", *args, "--stack-file", str(path), "--project-dir", str(ROOT)])
    out, err = capsys.readouterr()
    return code, out, err


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


def test_an_edit_the_stack_would_refuse_is_not_written(tmp_path):
    path = _stack(tmp_path)
    before = path.read_bytes()
    project = load_project(ROOT)
    # 30 is no step of the release: the edited stack does not validate, so nothing is written.
    with pytest.raises(StackEditError, match="the edited stack would not validate, nothing written: .*not a step"):
        write_step(project, "prod", path, Change("llama-8b", "v1", "v2", 30))
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == [path.name]


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


def _metrics(stable: dict[str, Any], canary: dict[str, Any]) -> CanaryMetrics:
    return CanaryMetrics(VersionMetrics("v1", **stable), VersionMetrics("v2", **canary), "30m", 0.0)


def _traffic(requests: float, errors: float = 0, shed: float = 0) -> Traffic:
    return Traffic(requests, errors, shed)


def test_a_canary_over_the_ttft_target_is_rolled_back_while_the_stable_one_meets_it():
    fast = {"total": _traffic(1000), "ttft_p95_ms": 480.0, "e2e_p95_ms": 900.0}
    over = {**fast, "ttft_p95_ms": 520.0}  # within 1.2 x stable's: only the target catches it
    result = verdict(_metrics(fast, over), CanaryAnalysis(), 500, 10)
    assert result.action == "rollback"
    assert result.reasons == ("all tiers: canary TTFT p95 520 ms > target 500 ms while stable's 480 ms is within",)
    # Both over the target: the profile's target is missed by the stable version too, not the canary's fault.
    assert verdict(_metrics({**fast, "ttft_p95_ms": 510.0}, over), CanaryAnalysis(), 500, 10).action == "promote"


def test_one_tier_breaching_rolls_back_and_a_tier_with_few_requests_is_not_judged():
    stable = {"total": _traffic(2000, 2), "tiers": {"premium": _traffic(1000, 1), "batch": _traffic(1000, 1)}}
    stable |= {"ttft_p95_ms": 100.0, "e2e_p95_ms": 900.0}
    canary = {"total": _traffic(700, 6), "tiers": {"premium": _traffic(400, 0), "batch": _traffic(300, 6)}}
    canary |= {"ttft_p95_ms": 100.0, "e2e_p95_ms": 900.0}
    result = verdict(_metrics(stable, canary), CanaryAnalysis(), None, 10)
    assert result.action == "rollback" and result.reasons == (
        "batch: canary 5xx rate (not 503) 2.00% > 1.00% and > stable's 0.10%",
    )
    few = {**canary, "tiers": {"premium": _traffic(500, 0), "batch": _traffic(200, 6)}}
    result = verdict(_metrics(stable, few), CanaryAnalysis(), None, 10)
    assert result.action == "promote"
    assert [c.outcome for c in result.checks if c.scope == "batch"] == ["too few"]


def test_missing_latency_figures_hold_rather_than_promote():
    healthy = {"total": _traffic(1000), "ttft_p95_ms": 100.0, "e2e_p95_ms": 900.0}
    result = verdict(_metrics(healthy, {**healthy, "ttft_p95_ms": None}), CanaryAnalysis(), 500, 10)
    assert result.action == "hold" and any("TTFT" in r for r in result.reasons)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["prod", "nope", "--prometheus", "http://127.0.0.1:9"], "no model 'nope' in the stack; models: llama-70b, llama-8b"),
        (["prod", "llama-70b", "--prometheus", "http://127.0.0.1:9"], "model 'llama-70b' has no canary"),
        (["prod", "llama-8b", "--prometheus", "http://127.0.0.1:9", "--at", "yesterday"], "--at 'yesterday' is neither"),
        (["prod", "llama-8b", "--prometheus", "http://127.0.0.1:9", "--at", "nan"], "--at 'nan' is not a time"),
        (["prod", "llama-8b", "--prometheus", "file:///etc/passwd"], "--prometheus 'file:///etc/passwd' is not an http(s) URL"),
        (["nostack", "llama-8b", "--prometheus", "http://127.0.0.1:9"], "no stack file"),
    ],
)
def test_bad_input_exits_2_with_the_flag_or_key_named(capsys, args, message):
    code, out, err = _run(capsys, *args)
    assert (code, out) == (2, "")
    assert err.startswith("error: ") and message in err


def test_an_invalid_stack_file_exits_2_naming_the_key(capsys, tmp_path):
    path = _stack(tmp_path, PROD_RELEASE.replace("canaryWeight: 10", "canaryWeight: 15"))
    code, _, err = _run(capsys, "prod", "llama-8b", "--prometheus", "http://127.0.0.1:9", "--stack-file", str(path))
    assert code == 2 and "inference-platform:models[1].release" in err and "canaryWeight 15 is not a step" in err


def test_an_unreachable_prometheus_exits_2_without_a_traceback():
    run = subprocess.run(
        [sys.executable, "-m", "platform_tools", "canary", "prod", "llama-8b", "--prometheus", "http://127.0.0.1:9"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.startswith("error: cannot query Prometheus at http://127.0.0.1:9 (--prometheus / PROMETHEUS_URL): ")
    assert len(run.stderr.strip().splitlines()) == 1


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


@pytest.mark.parametrize(
    "body, message",
    [
        (
            b'{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "abc"]}]}}',
            "a sample that is not one",
        ),
        (b'{"status": "success", "data": {"resultType": "vector", "result": [{"value": [1, "1"]}]}}', "a sample that is not one"),
        (b'{"status": "success", "data": "nope"}', "not a vector"),
        (b'{"status": "success", "data": {"resultType": "matrix", "result": []}}', "not a vector"),
        (b"[" * 100_000, "not JSON"),
        (b"x" * (5 << 20), "more than 4 MiB"),
    ],
)
def test_a_malformed_prometheus_answer_exits_2_without_a_traceback(capsys, tmp_path, body, message):
    """A Prometheus (or whatever answers at that URL) sending a body of another shape: exit 2, the
    URL and what was wrong, never a crash."""
    import http.server
    import threading

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        code, out, err = _run(capsys, "prod", "llama-8b", "--prometheus", url, "--stack-file", str(_stack(tmp_path)))
    finally:
        server.shutdown()
    assert (code, out) == (2, "") and err.startswith(f"error: Prometheus at {url} answered") and message in err


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


@pytest.mark.parametrize(
    "outputs, message",
    [
        ("{not json", "not JSON"),
        ('{"canaryReleases": {"llama-70b": {"stable": "v1", "canary": null, "canaryWeight": 0}}}', "no canaryReleases entry"),
        ('{"canaryReleases": {"llama-8b": "v1"}}', "canaryReleases.llama-8b is not a release"),
        ("[]", "not a JSON object"),
    ],
)
def test_bad_deployed_outputs_exit_2_naming_the_flag_or_output(capsys, tmp_path, outputs, message):
    deployed = tmp_path / "outputs.json"
    deployed.write_text(outputs)
    args = ["prod", "llama-8b", "--prometheus", "http://127.0.0.1:9", "--stack-file", str(_stack(tmp_path))]
    code, out, err = _run(capsys, *args, "--deployed", str(deployed))
    assert code == 2 and message in err and "Traceback" not in err, err


@pytest.mark.upstream_source
def test_the_refusal_code_counted_is_the_pickers_own_for_backpressure_and_no_servers():
    """429 is what the llm-d router at the pinned tag answers for backpressure (pkg/common/error/
    error.go BuildErrResponse: ResourceExhausted -> TooManyRequests), what the picker's proxy
    answers every refusal with, and what vLLM's OpenAI server never answers (vllm/entrypoints of
    the pinned source release), so the picker pods' 429s are the picker path's refusals alone."""
    from components.specs.endpoint_picker.envoy_routes import REFUSED
    from platform_config.pins import LLM_D_ROUTER_VERSION
    from platform_tools.canary import PICKER_REFUSED_CODE

    from .helpers import vllm_release
    from .test_endpoint_picker import MIRROR

    errors = mirror_show(MIRROR, f"v{LLM_D_ROUTER_VERSION}", "pkg/common/error/error.go")
    assert re.search(r"case ResourceExhausted:\s*httpCode = envoyTypePb\.StatusCode_TooManyRequests", errors)
    assert PICKER_REFUSED_CODE == str(REFUSED) == "429"
    release = vllm_release()
    # The Anthropic frontend only maps status codes to its error names.
    served = [path for path in release.files("vllm/entrypoints/") if path.endswith(".py") and "/anthropic/" not in path]
    # Any spelling of the code: HTTPStatus.TOO_MANY_REQUESTS, HTTPStatus(429), status_code=429.
    answering = re.compile(r"TOO_MANY_REQUESTS|(?<![0-9])429(?![0-9])")
    assert served and not [p for p in served if answering.search(release.text(p))]


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
