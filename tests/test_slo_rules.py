"""The models' SLO rules (components/specs/slo_rules.py) under the real `promtool`: every committed
stack's rules pass `promtool check rules`, and `promtool test rules` runs them on synthetic series
to show that each burn-rate alert fires when its objective is breached and stays silent when it is
met, that a model's own `slo` moves the threshold, and that the recording rules read what the
buckets hold. What a version's rules read of its own pods and its picker's: tests/test_slo_rules_per_version.py."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest

from components.slo_plan import SloPlan
from components.specs.slo_rules import (
    BURN_WINDOWS,
    ITEM_LATENCY_BUCKETS_SECONDS,
    latency_description,
    latency_slo,
    prometheus_rule,
)
from platform_config.profiles import PROFILES

from .helpers import STACKS, config_problems, prod_with_labeller_server, raw_stack, validate
from .promtool_rules import fails, passes, prom_labels, run_tests, strip_annotations
from .slo_rules_helpers import (
    AT,
    CHAT,
    MINUTES,
    VERSION,
    alert_labels,
    availability_burn,
    expected_annotations,
    request_series,
    rules_file,
    ttft_series,
)


def test_plans_follow_the_profiles_and_overrides() -> None:
    """Streaming profiles are judged on TTFT, the others on the request's duration; a target that
    is no bucket boundary is counted at the one below it, and the alert says so."""
    plan = validate(prod_with_labeller_server())
    by_name = {m.model.name: m.slo for m in plan.models}
    assert by_name["llama-8b"].latency == latency_slo("ttft", 500, 0.95)
    assert by_name["llama-8b"].availability_objective == 0.995
    code = by_name["llama-1b"].latency  # code completion: 200 ms, between TTFT boundaries 0.1 and 0.25 s
    assert code is not None and code.threshold_ms == 100
    assert "no histogram boundary" in latency_description(code)
    assert by_name["llama-8b-batch"].latency is not None and by_name["llama-8b-batch"].latency.sli == "duration"
    assert by_name["batch-labeller"].latency is None  # batch labelling has no latency target
    alerts = {
        r["labels"]["slo"]
        for g in prometheus_rule(by_name["batch-labeller"])["spec"]["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    assert alerts == {"availability"}


@pytest.mark.parametrize("field,value", [("latencyObjective", 0.5), ("availabilityObjective", 1.0), ("latencyTargetMs", 0)])
def test_objectives_and_targets_out_of_range_are_rejected(field: str, value: float) -> None:
    raw = copy.deepcopy(raw_stack("prod"))
    raw["models"][0]["slo"] = {field: value}
    assert any(f"models[0].slo.{field}" in problem for problem in config_problems(raw))


def test_burn_rates_are_the_workbooks() -> None:
    assert [(w.severity, w.long, w.short, w.burn_rate) for w in BURN_WINDOWS] == [
        ("page", "1h", "5m", 14.4),
        ("page", "6h", "30m", 6.0),
        ("ticket", "3d", "6h", 1.0),
    ]


@pytest.mark.real_server
@pytest.mark.parametrize("stack", STACKS)
def test_every_stacks_rules_pass_promtool_check(stack: str, promtool: str, tmp_path: Path) -> None:
    plan = validate(raw_stack(stack))
    rules = rules_file(tmp_path, *(m.slo for m in plan.models))
    result = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.real_server
def test_fast_latency_burn_pages_and_a_healthy_rate_is_silent(promtool: str, tmp_path: Path) -> None:
    """80% of requests over 500 ms burns the 5% budget at 16x: the page (and the ticket) fire.
    2% over it is within the objective: nothing fires."""
    rules = rules_file(tmp_path, CHAT)
    burning: dict[str, Any] = {
        "interval": "1m",
        "input_series": ttft_series(0.8),
        "alert_rule_test": [
            {
                "eval_time": AT,
                "alertname": "ModelLatencyBudgetBurn",
                "exp_alerts": [
                    {
                        "exp_labels": alert_labels(CHAT, "latency", "page"),
                        "exp_annotations": expected_annotations(CHAT, "latency", "page", "80%"),
                    },
                    {
                        "exp_labels": alert_labels(CHAT, "latency", "ticket"),
                        "exp_annotations": expected_annotations(CHAT, "latency", "ticket", "80%"),
                    },
                ],
            },
            availability_burn(None),
        ],
    }
    healthy: dict[str, Any] = {
        "interval": "1m",
        "input_series": ttft_series(0.02),
        "alert_rule_test": [{"eval_time": AT, "alertname": "ModelLatencyBudgetBurn", "exp_alerts": []}],
    }
    passes(run_tests(promtool, tmp_path, rules, [burning, healthy]))
    # The same healthy series expected to page: promtool must say no (the test can fail).
    healthy["alert_rule_test"] = burning["alert_rule_test"][:1]
    fails(run_tests(promtool, tmp_path, rules, [healthy]))


@pytest.mark.real_server
def test_a_slow_latency_burn_opens_a_ticket_and_does_not_page(promtool: str, tmp_path: Path) -> None:
    """8% of requests over 500 ms burns the 5% budget at 1.6x: under both page rows (14.4x, 6x),
    over the ticket's (1x)."""
    rules = rules_file(tmp_path, CHAT)
    strip_annotations(rules)
    slow = {
        "interval": "1m",
        "input_series": ttft_series(0.08),
        "alert_rule_test": [
            {
                "eval_time": AT,
                "alertname": "ModelLatencyBudgetBurn",
                "exp_alerts": [{"exp_labels": alert_labels(CHAT, "latency", "ticket")}],
            }
        ],
    }
    passes(run_tests(promtool, tmp_path, rules, [slow]))


def latency_page(slo: SloPlan, series: list[dict[str, str]], error_ratio: float) -> dict[str, Any]:
    """A promtool test: on `series`, the latency budget burns past the page rows (the page and the ticket fire for v1)
    and the 1 h latency error ratio is `error_ratio`."""
    pages = [{"exp_labels": alert_labels(slo, "latency", severity)} for severity in ("page", "ticket")]
    labels = prom_labels({"model": slo.model, "tenant": slo.tenant, "model_version": VERSION})
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [{"eval_time": AT, "alertname": "ModelLatencyBudgetBurn", "exp_alerts": pages}],
        "promql_expr_test": [
            {
                "expr": "round(model_version:slo_latency_errors:ratio_rate1h, 0.0001)",
                "eval_time": AT,
                "exp_samples": [{"labels": labels, "value": error_ratio}],
            }
        ],
    }


@pytest.mark.real_server
@pytest.mark.parametrize("le", ["30000", "30000.0"])
def test_a_non_streaming_model_is_judged_on_the_requests_duration(le: str, promtool: str, tmp_path: Path) -> None:
    """A summarization model (30 s per summary) is judged on the sidecar's request duration; the
    threshold bucket matches as Envoy spells it (`30000`) and as Prometheus 3 normalises it
    (`30000.0`). 90% of answers over 30 s pages; 5xx answers are left out of the latency ratio."""
    slo = SloPlan("summarizer", "summarizer", "team-b", 0.99, latency_slo("duration", 30000, 0.95))
    rules = rules_file(tmp_path, slo)
    strip_annotations(rules)
    labels = (
        'reporter="destination", destination_workload_namespace="team-b", destination_app="summarizer", '
        'destination_version="v1", tier="standard"'
    )
    ok, failed = f'{labels}, response_code="200"', f'{labels}, response_code="500"'
    series = [
        {"series": f'istio_request_duration_milliseconds_bucket{{{ok}, le="10000"}}', "values": f"0+0x{MINUTES}"},
        {"series": f'istio_request_duration_milliseconds_bucket{{{ok}, le="{le}"}}', "values": f"0+10x{MINUTES}"},
        {"series": f'istio_request_duration_milliseconds_bucket{{{ok}, le="+Inf"}}', "values": f"0+100x{MINUTES}"},
        {"series": f"istio_request_duration_milliseconds_count{{{ok}}}", "values": f"0+100x{MINUTES}"},
        # Fast failures: counted as answers by the availability SLO only.
        {"series": f'istio_request_duration_milliseconds_bucket{{{failed}, le="{le}"}}', "values": f"0+1000x{MINUTES}"},
        {"series": f'istio_request_duration_milliseconds_bucket{{{failed}, le="+Inf"}}', "values": f"0+1000x{MINUTES}"},
        {"series": f"istio_request_duration_milliseconds_count{{{failed}}}", "values": f"0+1000x{MINUTES}"},
    ]
    passes(run_tests(promtool, tmp_path, rules, [latency_page(slo, series, 0.9)]))


@pytest.mark.real_server
def test_an_embeddings_model_is_judged_per_item_however_its_requests_batch_them(promtool: str, tmp_path: Path) -> None:
    """The embeddings profile's 100 ms is per item: vLLM makes each input of a request an engine request of its own,
    so its end-to-end histogram counts items (on the buckets the server is given, ITEM_LATENCY_BUCKETS_SECONDS). A
    minute of 1,000 items (however many requests carried them), 900 of them within 100 ms, is a 10% error ratio: 20x
    the budget of a 99.5% objective, a page. 995 within it is the objective itself: silent."""
    profile = PROFILES["embeddings"]
    slo = SloPlan("embedder", "embedder", "team-search", 0.995, latency_slo(profile.latency_sli, 100, 0.995))
    rules = rules_file(tmp_path, slo)
    strip_annotations(rules)
    labels = 'namespace="team-search", model_name="embedder", model_version="v1"'

    def items_within(within_target: int, items: int = 1000) -> list[dict[str, str]]:
        """Per minute `items` items, `within_target` of them between 50 and 100 ms, the others above 100 ms."""
        within = {b: (0 if b < 0.05 else within_target if b <= 0.1 else items) for b in ITEM_LATENCY_BUCKETS_SECONDS}
        bucket = "vllm:e2e_request_latency_seconds_bucket"
        return [
            *({"series": f'{bucket}{{{labels}, le="{b!r}"}}', "values": f"0+{n}x{MINUTES}"} for b, n in within.items()),
            {"series": f'{bucket}{{{labels}, le="+Inf"}}', "values": f"0+{items}x{MINUTES}"},
            {"series": f"vllm:e2e_request_latency_seconds_count{{{labels}}}", "values": f"0+{items}x{MINUTES}"},
        ]

    passes(run_tests(promtool, tmp_path, rules, [latency_page(slo, items_within(900), 0.1)]))
    # 995 of 1,000 items within 100 ms is the objective itself: nothing fires.
    quiet = {
        "interval": "1m",
        "input_series": items_within(995),
        "alert_rule_test": [{"eval_time": AT, "alertname": "ModelLatencyBudgetBurn", "exp_alerts": []}],
    }
    passes(run_tests(promtool, tmp_path, rules, [quiet]))


@pytest.mark.real_server
def test_503_storm_pages_and_a_healthy_rate_is_silent(promtool: str, tmp_path: Path) -> None:
    """30% of answers 503 burns the 0.5% budget at 60x; 0.2% is within it."""
    rules = rules_file(tmp_path, CHAT)
    storm = {
        "interval": "1m",
        "input_series": request_series(0.3),
        "alert_rule_test": [availability_burn(CHAT)],
    }
    healthy: dict[str, Any] = {
        "interval": "1m",
        "input_series": request_series(0.002),
        "alert_rule_test": [availability_burn(None)],
    }
    strip_annotations(rules)
    passes(run_tests(promtool, tmp_path, rules, [storm, healthy]))


@pytest.mark.real_server
def test_a_models_own_latency_target_moves_the_threshold(promtool: str, tmp_path: Path) -> None:
    """llama-8b's canary (v2) answers every first token between 250 and 500 ms: within the chat
    profile's 500 ms, so silent; with the model's own `slo.latencyTargetMs: 250` every request is
    slow and the page fires. Same series, only the stack's config differs."""
    raw = copy.deepcopy(raw_stack("prod"))
    index = next(i for i, m in enumerate(raw["models"]) if m["name"] == "llama-8b")
    default = validate(raw).model("llama-8b").slo
    raw["models"][index]["slo"] = {"latencyTargetMs": 250}
    stricter = validate(raw).model("llama-8b").slo
    assert stricter.latency is not None and stricter.latency.threshold_ms == 250
    labels = f'namespace="serving", model_name="{default.served_name}", model_version="v2"'
    series = ttft_series(0.0, labels=labels)

    def test(expected: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [{"eval_time": AT, "alertname": "ModelLatencyBudgetBurn", "exp_alerts": expected}],
        }

    pages = [{"exp_labels": alert_labels(stricter, "latency", severity, "v2")} for severity in ("page", "ticket")]
    rules = rules_file(tmp_path, stricter)
    strip_annotations(rules)
    passes(run_tests(promtool, tmp_path, rules, [test(pages)]))
    rules = rules_file(tmp_path, default)
    strip_annotations(rules)
    passes(run_tests(promtool, tmp_path, rules, [test([])]))


@pytest.mark.real_server
def test_recorded_quantiles_and_ratios_read_the_buckets(promtool: str, tmp_path: Path) -> None:
    """Every request between 0.25 and 0.5 s: p95 TTFT is 0.25 + 0.95 x 0.25 = 0.4875 s
    (linear interpolation in the bucket); with 20% of them over 0.5 s, the latency error ratio
    over 1 h is 0.2, and 30% of answers 503 make the 503 ratio 0.3. (Rounded to 1e-4: promtool
    2.42 compares samples exactly, and two rates' quotient is off in the last bits.)"""
    rules = rules_file(tmp_path, CHAT)
    labels = {"model": CHAT.model, "tenant": CHAT.tenant, "model_version": VERSION}

    def reads(series: str, value: float, **extra: str) -> dict[str, Any]:
        return {
            "expr": f"round({series}, 0.0001)",
            "eval_time": AT,
            "exp_samples": [{"labels": prom_labels({**labels, **extra}), "value": value}],
        }

    fast = {
        "interval": "1m",
        "input_series": ttft_series(0.0),
        "promql_expr_test": [reads("model_version:vllm_time_to_first_token_seconds:p95", 0.4875)],
    }
    mixed = {
        "interval": "1m",
        "input_series": ttft_series(0.2) + request_series(0.3),
        "promql_expr_test": [
            reads("model_version:slo_latency_errors:ratio_rate1h", 0.2),
            reads("model_version:slo_availability_errors:ratio_rate1h", 0.3),
            reads("model_version_tier:istio_requests_503:ratio_rate5m", 0.3, tier="premium"),
        ],
    }
    passes(run_tests(promtool, tmp_path, rules, [fast, mixed]))
