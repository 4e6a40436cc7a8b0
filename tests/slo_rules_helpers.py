"""The SLO rule tests' scenario (tests/test_slo_rules.py, tests/test_slo_rules_per_version.py): a chat model's SLO
plan, the synthetic series of its servers, a rules file of its PrometheusRules, the alerts expected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from components.slo_plan import SloPlan
from components.specs.slo_rules import latency_slo, prometheus_rule

# A streaming chat model at its profile's objectives: TTFT within 500 ms for 95% of requests,
# 99.5% of answers not 5xx.
CHAT = SloPlan(
    model="chat-model",
    served_name="org/chat",
    tenant="team-a",
    availability_objective=0.995,
    latency=latency_slo("ttft", 500, 0.95),
)
VERSION = "v1"
TTFT = f'namespace="{CHAT.tenant}", model_name="{CHAT.served_name}", model_version="{VERSION}"'
ISTIO = (
    f'reporter="destination", destination_workload_namespace="{CHAT.tenant}", destination_app="{CHAT.model}", '
    f'destination_version="{VERSION}", tier="premium"'
)
# Requests per minute in every scenario, and how long the series run (minutes).
PER_MINUTE, MINUTES = 100, 150


def rules_file(tmp_path: Path, *slos: SloPlan) -> Path:
    """The rule groups of the models' PrometheusRules as a Prometheus rules file."""
    path = tmp_path / "rules.yaml"
    groups = [group for slo in slos for group in prometheus_rule(slo)["spec"]["groups"]]
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


# vLLM 0.18.0's TTFT bucket boundaries as its Python client writes them (tests/test_vllm_metrics.py
# holds them to the source release).
TTFT_LE = (
    "0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0", "2.5", "5.0",
    "7.5", "10.0", "20.0", "40.0", "80.0", "160.0", "640.0", "2560.0",
)  # fmt: skip


def ttft_series(slow_share: float, labels: str = TTFT) -> list[dict[str, str]]:
    """TTFT histogram series in every bucket vLLM writes, every request between 0.25 and 1 s:
    `slow_share` of them above 0.75 s, the rest at most 0.5 s."""
    fast = round(PER_MINUTE * (1 - slow_share))

    def cumulative(le: str) -> int:
        return 0 if float(le) <= 0.25 else fast if float(le) <= 0.75 else PER_MINUTE

    series = [
        {"series": f'vllm:time_to_first_token_seconds_bucket{{{labels}, le="{le}"}}', "values": f"0+{count}x{MINUTES}"}
        for le, count in [*((le, cumulative(le)) for le in TTFT_LE), ("+Inf", PER_MINUTE)]
    ]
    series.append({"series": f"vllm:time_to_first_token_seconds_count{{{labels}}}", "values": f"0+{PER_MINUTE}x{MINUTES}"})
    return series


def request_series(share_503: float, labels: str = ISTIO) -> list[dict[str, str]]:
    failed = round(PER_MINUTE * share_503)
    return [
        {"series": f'istio_requests_total{{{labels}, response_code="200"}}', "values": f"0+{PER_MINUTE - failed}x{MINUTES}"},
        {"series": f'istio_requests_total{{{labels}, response_code="503"}}', "values": f"0+{failed}x{MINUTES}"},
    ]


def alert_labels(slo: SloPlan, name: str, severity: str, version: str = VERSION) -> dict[str, str]:
    return {"model": slo.model, "tenant": slo.tenant, "model_version": version, "severity": severity, "slo": name}


def availability_burn(slo: SloPlan | None) -> dict[str, Any]:
    """promtool's expectation of the availability alert at AT: paging and ticketing for `slo`, or (None) silent."""
    fired = [{"exp_labels": alert_labels(slo, "availability", severity)} for severity in ("page", "ticket")] if slo else []
    return {"eval_time": AT, "alertname": "ModelAvailabilityBudgetBurn", "exp_alerts": fired}


# When the alerts are read: the 1 h window is full, and both the page's and the ticket's `for`
# have passed (a burn that trips the page trips the ticket too: the 3 d window holds every sample).
AT = "70m"


# --- helpers for expected alerts ----------------------------------------------------------


def expected_annotations(slo: SloPlan, name: str, severity: str, value: str) -> dict[str, str]:
    """The alert's annotations as Prometheus renders them for version v1 at `value`."""
    rule = next(
        r
        for g in prometheus_rule(slo)["spec"]["groups"]
        for r in g["rules"]
        if r.get("alert") and r["labels"]["slo"] == name and r["labels"]["severity"] == severity
    )
    return {
        key: text.replace("{{ $labels.model_version }}", VERSION).replace("{{ $value | humanizePercentage }}", value)
        for key, text in rule["annotations"].items()
    }
