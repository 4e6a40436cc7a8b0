"""A model's service level objectives as a PrometheusRule (pure functions): recording rules for
what its versions and tiers are doing, and multi-window, multi-burn-rate alerts on its error
budgets.

What is read, all of it already scraped (the ServiceMonitor/PodMonitor of every version scrapes
the pod's merged metrics: vLLM's and its Istio sidecar's):

- vLLM, per version: `namespace` (the scrape target's), `model_version` (the pod label the
  monitors relabel in, components/specs/pod_parts.py merged_metrics_relabelings) and vLLM's own
  `model_name` (the first --served-model-name: the model's OpenAI name). vLLM has no tier label.
  Names, types, labels and buckets: vLLM 0.33.0's source release (PyPI vllm-0.33.0.tar.gz,
  platform_config/pins.py VLLM_SOURCE), vllm/v1/metrics/loggers.py PrometheusStatLogger, every
  one with labels `model_name`, `engine`: gauges `vllm:num_requests_running` (line 528),
  `vllm:num_requests_waiting` (538), `vllm:kv_cache_usage_perc` (620); counter
  `vllm:generation_tokens` (799, exposed as `_total`); histograms
  `vllm:time_to_first_token_seconds` (931), `vllm:inter_token_latency_seconds` (941),
  `vllm:e2e_request_latency_seconds` (961) and `vllm:request_queue_time_seconds` (971), the last
  two on the `request_latency` bucket family (vllm/v1/metrics/buckets.py REQUEST_LATENCY_BUCKETS,
  the default: the servers pass no --custom-histogram-buckets). tests/test_vllm_metrics.py holds
  every series and bucket the rules read to those files. The older `vllm:time_per_output_token_seconds`
  is gone since 0.18.0.
- Istio, per version and tier: `istio_requests_total` (`response_code`) and
  `istio_request_duration_milliseconds` as the server's sidecar reports them
  (`reporter="destination"`, `destination_app` = the model, `destination_version` = the version,
  `destination_workload_namespace` = the tenant; the `tier` label from the tenant's Telemetry,
  components/specs/telemetry.py). Its buckets are Envoy's default histogram buckets
  (envoyproxy/envoy source/common/stats/histogram_impl.h `HistogramSettingsImpl::defaultBuckets`;
  Istio sets none of its own), not checked at the Envoy of the pinned Istio.

- DCGM, per version: `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (0..1, also reported for MIG slices), whose
  `namespace` and `pod` name the pod holding the GPU (the exporter's pod mapping, scraped with
  honorLabels: components/specs/gpu_operator.py). The exporter knows no version, so the pod's
  version comes from kube-state-metrics' `kube_pod_labels`, which exports the model and version
  labels the monitoring component allows (ALLOWED_POD_LABELS).

Recorded series follow Prometheus' `level:metric:operations` naming (prometheus.io, "Recording
rules"): `model_version:...` per version, `model_version_tier:...` per version and tier, every one
labelled with the model and tenant.

SLOs (each over a 30-day budget, per version, so a failing canary is not hidden by the stable
version's traffic):
- availability: answers that are not 5xx (a 503 the platform shed included), over answers (a
  request the caller abandoned, code 0, is neither). A version behind an endpoint picker also counts
  the requests its picker path refused, which never reach a server: its pickers' sidecars report
  them as 429 (the gateway answers 503), per version by the picker's Deployment name;
- latency: requests within the latency target, over requests. Streaming profiles are judged on
  vLLM's time to first token; embeddings (a pooling runner) per item, on vLLM's end-to-end latency
  of each input (each its own engine request, on the buckets ITEM_LATENCY_BUCKETS_SECONDS the
  server is given); the others (summaries) on the whole request as the server's sidecar measures
  it, answered requests only. A histogram can only count requests at a
  bucket boundary, so the threshold is the boundary at or below the target (stricter, never
  laxer); the alert's description says when the two differ.

Alerts: the Google SRE Workbook's recommended multi-window, multi-burn-rate parameters (chapter 5,
"Alerting on SLOs", section 6, table 5-8): page when 2% of the budget burns in 1 h (burn rate 14.4
over 1 h and 5 m) or 5% in 6 h (6 over 6 h and 30 m); ticket when 10% burns in 3 days (1 over 3 d
and 6 h). The short window makes the alert stop soon after the burn does. A burn rate times the
error budget above 1 can never be reached: the fast page needs an objective above 93.06%.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..constants import LABEL_MODEL, LABEL_MODEL_VERSION, standard_labels
from ..slo_plan import LatencySli, LatencySlo, SloPlan
from .metrics import ksm_label, plain_name, promql_names, promql_string

# vLLM 0.33.0's time-to-first-token buckets, in seconds (vllm/v1/metrics/buckets.py TIME_TO_FIRST_TOKEN_BUCKETS, the
# default of `vllm:time_to_first_token_seconds`, see above).
VLLM_TTFT_BUCKETS_SECONDS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
# Envoy's default histogram buckets, which Istio's request duration uses, in milliseconds.
ISTIO_DURATION_BUCKETS_MS: tuple[float, ...] = (
    0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000,
    1800000, 3600000,
)  # fmt: skip

# Each item's latency on a pooling server (embeddings), in seconds: the `request_latency` family of its vLLM histograms
# (`vllm:e2e_request_latency_seconds` among them), which such a server is given with --custom-histogram-buckets
# (components/specs/pod.py; vLLM 0.33.0 vllm/config/observability.py custom_histogram_buckets). vLLM's default family
# starts at 0.3 s (vllm/v1/metrics/buckets.py REQUEST_LATENCY_BUCKETS), which cannot count an item within 100 ms.
ITEM_LATENCY_BUCKETS_SECONDS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.8, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)  # fmt: skip

Severity = Literal["page", "ticket"]
SEVERITIES: tuple[Severity, ...] = ("page", "ticket")

# The alerts' runbooks: sections of docs/design/slo.md.
RUNBOOKS = {"latency": "docs/design/slo.md#latency-budget-burn", "availability": "docs/design/slo.md#availability-budget-burn"}

# The pod labels kube-state-metrics must export for the GPU rule to tell versions apart
# (`--metric-labels-allowlist`, set in components/monitoring.py).
ALLOWED_POD_LABELS: tuple[str, ...] = (LABEL_MODEL, LABEL_MODEL_VERSION)
GPU_ACTIVITY_SERIES = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"

# The label alert routing reads to send a tenant's alerts to its team.
TEAM_LABEL = "tenant"


@dataclass(frozen=True)
class BurnWindow:
    """One row of the workbook's table: alert at `severity` when the error ratio is above
    `burn_rate` x the error budget over both the long and the short window."""

    severity: Severity
    long: str
    short: str
    burn_rate: float
    # Share of the 30-day budget spent when the long window fires (for the description).
    budget_spent: str


BURN_WINDOWS: tuple[BurnWindow, ...] = (
    BurnWindow("page", "1h", "5m", 14.4, "2%"),
    BurnWindow("page", "6h", "30m", 6.0, "5%"),
    BurnWindow("ticket", "3d", "6h", 1.0, "10%"),
)
# Every window an error ratio is recorded over.
WINDOWS: tuple[str, ...] = ("5m", "30m", "1h", "6h", "3d")


def buckets_ms(sli: LatencySli) -> tuple[float, ...]:
    """The histogram boundaries, in milliseconds, a latency target of this kind is counted at."""
    if sli == "ttft":
        return tuple(round(b * 1000, 6) for b in VLLM_TTFT_BUCKETS_SECONDS)
    if sli == "item":
        return tuple(round(b * 1000, 6) for b in ITEM_LATENCY_BUCKETS_SECONDS)
    return ISTIO_DURATION_BUCKETS_MS


def boundary_at_or_below(sli: LatencySli, target_ms: int) -> float:
    """The largest bucket boundary not above the target. A target is a whole number of
    milliseconds, at least 1: never below the smallest boundary (1 ms and 0.5 ms)."""
    return max(b for b in buckets_ms(sli) if b <= target_ms)


def latency_slo(sli: LatencySli, target_ms: int | None, objective: float) -> LatencySlo | None:
    """The latency objective for a target (None: no target), counted at the boundary at or below it."""
    if target_ms is None:
        return None
    return LatencySlo(sli, target_ms, boundary_at_or_below(sli, target_ms), objective)


# --- selectors ----------------------------------------------------------------------------


def _vllm(slo: SloPlan) -> str:
    return f"namespace={promql_string(slo.tenant)}, model_name={promql_string(slo.served_name)}"


def _istio(slo: SloPlan) -> str:
    return (
        f'reporter="destination", destination_workload_namespace={promql_string(slo.tenant)}, '
        f"destination_app={promql_string(slo.model)}"
    )


def _refusals(slo: SloPlan, by: str, window: str) -> str | None:
    """The requests the versions' picker path refused, as their pickers' sidecars report them (429:
    every refusal of the picker path, which the gateway answers 503), by `by`, the version named
    `destination_version` as on the servers' series; None without pickers."""
    if not slo.picker_workloads:
        return None
    series = (
        f'rate(istio_requests_total{{reporter="destination", destination_workload_namespace={promql_string(slo.tenant)}, '
        f'destination_workload=~{promql_names(slo.picker_workloads)}, response_code="429"}}[{window}])'
    )
    # The picker pods carry no version label; their Deployment's name does (exact names above).
    version = promql_string(f"{plain_name(slo.model)}-(.+)-epp")
    named = f'label_replace({series}, "destination_version", "$1", "destination_workload", {version})'
    return f"sum by ({by}) ({named})"


def _with_refusals(counted: str, refusals: str | None) -> str:
    """`counted` plus the refusals of the same version (and tier), either alone where the other has no series."""
    if refusals is None:
        return counted
    return f"(({counted}) + ({refusals}) or ({counted}) or ({refusals}))"


def _as_version(expr: str) -> str:
    """Istio's `destination_version` renamed to the `model_version` vLLM's series carry, so the
    per-version series of both sources have the same labels (one series per version: the sum
    only drops the old label)."""
    return f'sum without (destination_version) (label_replace({expr}, "model_version", "$1", "destination_version", "(.*)"))'


def _quantile(q: float, bucket: str, by: str, window: str = "5m") -> str:
    return f"histogram_quantile({q}, sum by ({by}, le) (rate({bucket}[{window}])))"


# --- recording rules ------------------------------------------------------------------------


def _record(name: str, expr: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"record": name, "expr": expr, "labels": labels}


def version_rules(slo: SloPlan, labels: dict[str, str]) -> list[dict[str, Any]]:
    """What each version's vLLM servers do: latency quantiles, queue, load, cache and tokens."""
    sel = _vllm(slo)
    rules = []
    for metric in (
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
    ):
        short = metric.removeprefix("vllm:")
        for q in (0.5, 0.95, 0.99):
            rules.append(
                _record(
                    f"model_version:vllm_{short}:p{round(q * 100)}",
                    _quantile(q, f"{metric}_bucket{{{sel}}}", "model_version"),
                    labels,
                )
            )
    rules += [
        _record(
            "model_version:vllm_generation_tokens:rate5m",
            f"sum by (model_version) (rate(vllm:generation_tokens_total{{{sel}}}[5m]))",
            labels,
        ),
        _record(
            "model_version:vllm_kv_cache_usage_perc:max", f"max by (model_version) (vllm:kv_cache_usage_perc{{{sel}}})", labels
        ),
        _record(
            "model_version:vllm_kv_cache_usage_perc:avg", f"avg by (model_version) (vllm:kv_cache_usage_perc{{{sel}}})", labels
        ),
        _record(
            "model_version:vllm_num_requests_running:sum", f"sum by (model_version) (vllm:num_requests_running{{{sel}}})", labels
        ),
        _record(
            "model_version:vllm_num_requests_waiting:sum", f"sum by (model_version) (vllm:num_requests_waiting{{{sel}}})", labels
        ),
    ]
    return rules


def gpu_rules(slo: SloPlan, labels: dict[str, str]) -> list[dict[str, Any]]:
    """How busy each version keeps its GPUs (or MIG slices): DCGM's engine activity of the pods
    holding them, joined to each pod's version label."""
    model_label, version_label = (ksm_label(key) for key in ALLOWED_POD_LABELS)
    tenant = promql_string(slo.tenant)
    pods = (
        f"max by (namespace, pod, {version_label}) "
        f"(kube_pod_labels{{namespace={tenant}, {model_label}={promql_string(slo.model)}}})"
    )
    versions = f'label_replace({pods}, "model_version", "$1", "{version_label}", "(.*)")'
    activity = f"{GPU_ACTIVITY_SERIES}{{namespace={tenant}}}"
    return [
        _record(
            "model_version:dcgm_gpu_engine_active:avg",
            f"avg by (model_version) ({activity} * on (namespace, pod) group_left (model_version) {versions})",
            labels,
        )
    ]


def tier_rules(slo: SloPlan, labels: dict[str, str]) -> list[dict[str, Any]]:
    """What each version answers each tier, as the server's sidecar saw it."""
    sel = _istio(slo)
    by = "destination_version, tier"
    refused = _refusals(slo, by, "5m")
    answers = _with_refusals(f'sum by ({by}) (rate(istio_requests_total{{{sel}, response_code!="0"}}[5m]))', refused)
    shed = _with_refusals(f'sum by ({by}) (rate(istio_requests_total{{{sel}, response_code="503"}}[5m]))', refused)
    rules = [
        _record(
            "model_version_tier:istio_requests:rate5m",
            _as_version(_with_refusals(f"sum by ({by}) (rate(istio_requests_total{{{sel}}}[5m]))", refused)),
            labels,
        ),
        _record("model_version_tier:istio_requests_503:ratio_rate5m", _as_version(f"{shed} / {answers}"), labels),
        _record(
            "model_version_tier:istio_requests_5xx_not_503:ratio_rate5m",
            _as_version(
                f'sum by ({by}) (rate(istio_requests_total{{{sel}, response_code=~"5..", response_code!="503"}}[5m])) / {answers}'
            ),
            labels,
        ),
    ]
    for q in (0.5, 0.95, 0.99):
        bucket = f'istio_request_duration_milliseconds_bucket{{{sel}, response_code!~"5.."}}'
        rules.append(
            _record(
                f"model_version_tier:istio_request_duration_milliseconds:p{round(q * 100)}",
                _as_version(_quantile(q, bucket, by)),
                labels,
            )
        )
    return rules


# The vLLM histogram a latency objective counts, where vLLM's is the one: each request's first token, each item.
VLLM_HISTOGRAM_OF: dict[LatencySli, str] = {
    "ttft": "vllm:time_to_first_token_seconds",
    "item": "vllm:e2e_request_latency_seconds",
}


def latency_error_ratio(slo: SloPlan, window: str) -> str:
    """Requests over the latency threshold, over requests, per version."""
    assert slo.latency is not None
    le = slo.latency.threshold_le
    if slo.latency.sli in VLLM_HISTOGRAM_OF:
        sel, histogram = _vllm(slo), VLLM_HISTOGRAM_OF[slo.latency.sli]
        fast = f"sum by (model_version) (rate({histogram}_bucket{{{sel}, {le}}}[{window}]))"
        total = f"sum by (model_version) (rate({histogram}_count{{{sel}}}[{window}]))"
        return f"1 - ({fast} / {total})"
    sel = f'{_istio(slo)}, response_code!~"5.."'
    fast = f"sum by (destination_version) (rate(istio_request_duration_milliseconds_bucket{{{sel}, {le}}}[{window}]))"
    total = f"sum by (destination_version) (rate(istio_request_duration_milliseconds_count{{{sel}}}[{window}]))"
    return _as_version(f"1 - ({fast} / {total})")


def availability_error_ratio(slo: SloPlan, window: str) -> str:
    """5xx answers (503 included) over answers, per version, the picker path's refusals counted as
    the 503s their clients get."""
    sel = _istio(slo)
    refused = _refusals(slo, "destination_version", window)
    errors = f'sum by (destination_version) (rate(istio_requests_total{{{sel}, response_code=~"5.."}}[{window}]))'
    answers = f'sum by (destination_version) (rate(istio_requests_total{{{sel}, response_code!="0"}}[{window}]))'
    return _as_version(f"{_with_refusals(errors, refused)} / {_with_refusals(answers, refused)}")


def error_ratio_series(slo_name: str, window: str) -> str:
    return f"model_version:slo_{slo_name}_errors:ratio_rate{window}"


# --- alerts ---------------------------------------------------------------------------------


def burn_alert(
    slo: SloPlan,
    slo_name: Literal["latency", "availability"],
    objective: float,
    severity: Severity,
    what: str,
    labels: dict[str, str],
) -> dict[str, Any]:
    """One severity's alert on one SLO: any of its rows of the workbook's table firing."""
    budget = 1 - objective
    sel = f"model={promql_string(slo.model)}, tenant={promql_string(slo.tenant)}"
    rows = [w for w in BURN_WINDOWS if w.severity == severity]
    conditions = [
        f"({error_ratio_series(slo_name, w.long)}{{{sel}}} > {w.burn_rate * budget:.6g}"
        f" and {error_ratio_series(slo_name, w.short)}{{{sel}}} > {w.burn_rate * budget:.6g})"
        for w in rows
    ]
    windows = "; ".join(f"{w.burn_rate:g}x over {w.long} and {w.short} ({w.budget_spent} of the budget)" for w in rows)
    alert = "ModelLatencyBudgetBurn" if slo_name == "latency" else "ModelAvailabilityBudgetBurn"
    return {
        "alert": alert,
        "expr": " or ".join(conditions),
        # The short window already confirms the burn; waiting longer only delays the page.
        "for": "2m" if severity == "page" else "15m",
        "labels": {**labels, "severity": severity, "slo": slo_name},
        "annotations": {
            "summary": f"{slo.model} version {{{{ $labels.model_version }}}} is burning its {slo_name} error budget",
            "description": (
                f"{what} Objective {objective:.4g} over 30 days (error budget {budget:.4g}); "
                f"{severity} when the error ratio exceeds {windows}. Now: {{{{ $value | humanizePercentage }}}} "
                "over the long window."
            ),
            "runbook_url": RUNBOOKS[slo_name],
        },
    }


def latency_description(latency: LatencySlo) -> str:
    what = {
        "ttft": "time to first token (vLLM)",
        "item": "each item's latency (vLLM: every input of a request is an item of its own)",
        "duration": "request duration (the server's sidecar, answered requests)",
    }[latency.sli]
    text = f"Latency SLO: {what} within {latency.threshold_ms:g} ms."
    if latency.threshold_ms != latency.target_ms:
        text += (
            f" The target is {latency.target_ms} ms, which is no histogram boundary: requests are counted at "
            f"{latency.threshold_ms:g} ms, the boundary at or below it (stricter than the target)."
        )
    return text


def prometheus_rule(slo: SloPlan) -> dict[str, Any]:
    """The model's PrometheusRule, in its tenant's namespace."""
    labels = {"model": slo.model, TEAM_LABEL: slo.tenant}
    slis: list[tuple[Literal["latency", "availability"], float, str]] = [
        ("availability", slo.availability_objective, "Availability SLO: answers that are not 5xx (503 included).")
    ]
    if slo.latency is not None:
        slis.insert(0, ("latency", slo.latency.objective, latency_description(slo.latency)))
    ratios = {"latency": latency_error_ratio, "availability": availability_error_ratio}
    groups: list[dict[str, Any]] = [
        {"name": f"{slo.model}.versions", "interval": "30s", "rules": version_rules(slo, labels) + gpu_rules(slo, labels)},
        {"name": f"{slo.model}.tiers", "interval": "30s", "rules": tier_rules(slo, labels)},
        {
            "name": f"{slo.model}.slo-error-ratios",
            "interval": "30s",
            "rules": [
                _record(error_ratio_series(name, window), ratios[name](slo, window), labels)
                for name, _, _ in slis
                for window in WINDOWS
            ],
        },
        {
            "name": f"{slo.model}.slo-alerts",
            "rules": [
                burn_alert(slo, name, objective, severity, what, labels)
                for name, objective, what in slis
                for severity in SEVERITIES
            ],
        },
    ]
    name = f"{slo.model}-slo"
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": name, "namespace": slo.tenant, "labels": standard_labels(name, "slo")},
        "spec": {"groups": groups},
    }
