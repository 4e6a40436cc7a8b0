"""The canary verdict: read each running version's metrics from Prometheus, compare the canary
with the stable version and with its profile's target, and say what to do next.

What is read (every query is built here, in `queries`, and nowhere else), over the model's
`release.analysis.window` ending at the evaluation time, as instant queries:

- Requests, per version, tier and response code: `sum by (destination_version, tier,
  response_code) (increase(istio_requests_total{<sel>}[<window>]))`. `<sel>` is
  `reporter="destination", destination_workload_namespace="<tenant>", destination_app="<model>",
  destination_version=~"<stable>|<canary>"`: the metrics the sidecar of each version's vLLM pod
  reports for the requests it received. Istio takes `destination_app`/`destination_version` from
  the pod's `app`/`version` labels, which the platform sets to the model and version names
  (components/shapes.py ServerPlan.labels). `tier` is the label the mesh's Telemetry adds from
  the tier header; a request without one counts under "(no tier)". Error rate: answers 5xx
  other than 503, over all answers; shed rate: 503 answers over all answers (code 0, a
  request the client abandoned, is neither).
- Requests the version's endpoint picker path refused (versions behind a picker only; they never
  reach a pod, so the sidecar's counts above miss them), per version and tier: `sum by
  (destination_workload, tier) (increase(istio_requests_total{reporter="destination",
  destination_workload_namespace="<tenant>", destination_workload=~"<pickers>", response_code="429"}
  [<window>]))`, what the sidecar of each version's picker pods reports. Every refusal of the picker
  path leaves the picker's proxy as 429 with `x-llm-d-request-dropped-reason`, which the gateway
  filter answers 503 (components/specs/endpoint_picker/envoy_routes.py REFUSED): the picker's own (a queue TTL or
  a band's cap, 429; no endpoints, 503 turned 429 by the proxy; llm-d router v0.10.0
  pkg/common/error/error.go) and the proxy's (the tier's queue timeout, the picker unreachable). The
  servers never answer 429 (vLLM 0.33.0's OpenAI server has no such answer), so the picked
  requests' own answers, which pass the same sidecar, are never counted twice. Each counts as a
  request and a 503 of its version and tier. `destination_workload` is the picker's Deployment
  (components/specs/endpoint_picker/names.py epp_name_of); `tier` is the Telemetry's, as above.
- End-to-end latency p95 in ms, per version and per version and tier: `histogram_quantile(0.95,
  sum by (destination_version[, tier], le) (increase(istio_request_duration_milliseconds_bucket{
  <sel>, response_code!~"5.."}[<window>])))`: answered requests only, so that a version failing
  fast does not look quick.
- Time to first token p95 in ms, per version (vLLM has no tier label: one figure for all tiers):
  `1000 * histogram_quantile(0.95, sum by (model_version, le) (increase(
  vllm:time_to_first_token_seconds_bucket{namespace="<tenant>", model_name="<served name>",
  model_version=~"<stable>|<canary>"}[<window>])))`. The histogram is vLLM 0.33.0's
  (its source release, vllm/v1/metrics/loggers.py PrometheusStatLogger, line 931: labels
  model_name, the first --served-model-name (vllm/config/model.py get_served_model_name), and
  engine; tests/test_vllm_metrics.py checks the query against it); `namespace` is the scrape target's and `model_version` the
  pod label the PodMonitor/ServiceMonitor relabels in (components/specs/pod_parts.py
  merged_metrics_relabelings).

The verdict's rules: platform_tools/canary_verdict.py; its report: platform_tools/canary_report.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from .prometheus import query

# --- the metrics and their labels ------------------------------------------------------------

ISTIO_REQUESTS = "istio_requests_total"
ISTIO_DURATION_BUCKETS = "istio_request_duration_milliseconds_bucket"
VLLM_TTFT_BUCKETS = "vllm:time_to_first_token_seconds_bucket"
# The label the mesh's Telemetry adds to Istio's request metrics from the tier header.
TIER_LABEL = "tier"
ISTIO_VERSION_LABEL = "destination_version"
# What the picker's proxy answers for every refusal of the picker path (see the module docstring).
PICKER_REFUSED_CODE = "429"
# The pod label inference.platform/model-version, relabelled onto every scraped series.
VLLM_VERSION_LABEL = "model_version"
QUANTILE = 0.95
NO_TIER = "(no tier)"


@dataclass(frozen=True)
class Target:
    """What the queries select: one model's running versions."""

    namespace: str
    # The model's name: its pods' `app` label (Istio's destination_app).
    app: str
    # The name vLLM labels its metrics with (`model_name`): the first --served-model-name.
    served_name: str
    stable: str
    canary: str
    # The endpoint pickers' Deployments (Istio's destination_workload), each to its version; empty
    # where the versions have none.
    picker_workloads: Mapping[str, str] = field(default_factory=dict)


def _label_value(value: str) -> str:
    return json.dumps(value)  # a PromQL string literal: double quotes, backslash escapes


def _versions(target: Target) -> str:
    # Version names are DNS labels: no regular-expression metacharacters.
    return _label_value(f"{target.stable}|{target.canary}")


def _reported_by_destination(target: Target, *matchers: str) -> str:
    """A selector of the requests the sidecars in the tenant's namespace report as received."""
    every = ['reporter="destination"', f"destination_workload_namespace={_label_value(target.namespace)}", *matchers]
    return "{" + ", ".join(every) + "}"


def _istio_selector(target: Target, *extra: str) -> str:
    return _reported_by_destination(
        target, f"destination_app={_label_value(target.app)}", f"{ISTIO_VERSION_LABEL}=~{_versions(target)}", *extra
    )


def _picker_selector(target: Target) -> str:
    # Deployment names are DNS labels: no regular-expression metacharacters.
    return _reported_by_destination(
        target,
        f"destination_workload=~{_label_value('|'.join(sorted(target.picker_workloads)))}",
        f"response_code={_label_value(PICKER_REFUSED_CODE)}",
    )


def queries(target: Target, window: str) -> dict[str, str]:
    """The PromQL of every figure, by name (see the module docstring)."""
    istio = _istio_selector(target)
    answered = _istio_selector(target, 'response_code!~"5.."')
    vllm = (
        f"{{namespace={_label_value(target.namespace)}, model_name={_label_value(target.served_name)}, "
        f"{VLLM_VERSION_LABEL}=~{_versions(target)}}}"
    )
    picker_queries = (
        {
            "picker_shed": f"sum by (destination_workload, {TIER_LABEL}) "
            f"(increase({ISTIO_REQUESTS}{_picker_selector(target)}[{window}]))"
        }
        if target.picker_workloads
        else {}
    )
    return {
        "requests": f"sum by ({ISTIO_VERSION_LABEL}, {TIER_LABEL}, response_code) (increase({ISTIO_REQUESTS}{istio}[{window}]))",
        **picker_queries,
        "e2e_p95_ms": f"histogram_quantile({QUANTILE}, sum by ({ISTIO_VERSION_LABEL}, le) "
        f"(increase({ISTIO_DURATION_BUCKETS}{answered}[{window}])))",
        "e2e_p95_ms_by_tier": f"histogram_quantile({QUANTILE}, sum by ({ISTIO_VERSION_LABEL}, {TIER_LABEL}, le) "
        f"(increase({ISTIO_DURATION_BUCKETS}{answered}[{window}])))",
        "ttft_p95_ms": f"1000 * histogram_quantile({QUANTILE}, sum by ({VLLM_VERSION_LABEL}, le) "
        f"(increase({VLLM_TTFT_BUCKETS}{vllm}[{window}])))",
    }


# --- the figures -------------------------------------------------------------------------------


@dataclass
class Traffic:
    requests: float = 0.0
    # Answers 5xx other than 503, and 503 answers.
    errors: float = 0.0
    shed: float = 0.0

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.requests if self.requests else None

    @property
    def shed_rate(self) -> float | None:
        return self.shed / self.requests if self.requests else None

    def add(self, code: str, count: float) -> None:
        self.requests += count
        if code == "503":
            self.shed += count
        elif code.startswith("5"):
            self.errors += count


@dataclass
class VersionMetrics:
    version: str
    total: Traffic = field(default_factory=Traffic)
    tiers: dict[str, Traffic] = field(default_factory=dict)
    # Of the 503s in `total`: those the version's endpoint picker path answered.
    picker_shed: float = 0.0
    ttft_p95_ms: float | None = None
    e2e_p95_ms: float | None = None
    e2e_p95_ms_by_tier: dict[str, float | None] = field(default_factory=dict)

    def add(self, tier: str, code: str, count: float) -> None:
        """Answers with `code` in `tier`, counted over all tiers and in that tier."""
        self.total.add(code, count)
        self.tiers.setdefault(tier, Traffic()).add(code, count)


@dataclass
class CanaryMetrics:
    stable: VersionMetrics
    canary: VersionMetrics
    window: str
    at: float
    queries: dict[str, str] = field(default_factory=dict)


def read_metrics(url: str, target: Target, window: str, at: float) -> CanaryMetrics:
    """Every figure of both versions, from Prometheus at `url`, for the window ending at `at`."""
    promql = queries(target, window)
    versions = {v: VersionMetrics(v) for v in (target.stable, target.canary)}
    for sample in query(url, promql["requests"], at):
        labels = sample.labels
        metrics = versions.get(labels.get(ISTIO_VERSION_LABEL, ""))
        count = sample.value
        if metrics is None or count is None:
            continue
        code = labels.get("response_code", "")
        metrics.add(labels.get(TIER_LABEL) or NO_TIER, code, count)
    if "picker_shed" in promql:
        for sample in query(url, promql["picker_shed"], at):
            metrics = versions.get(target.picker_workloads.get(sample.labels.get("destination_workload", ""), ""))
            count = sample.value
            if metrics is None or count is None:
                continue
            metrics.picker_shed += count
            metrics.add(sample.labels.get(TIER_LABEL) or NO_TIER, "503", count)
    for sample in query(url, promql["e2e_p95_ms"], at):
        if (metrics := versions.get(sample.labels.get(ISTIO_VERSION_LABEL, ""))) is not None:
            metrics.e2e_p95_ms = sample.value
    for sample in query(url, promql["e2e_p95_ms_by_tier"], at):
        if (metrics := versions.get(sample.labels.get(ISTIO_VERSION_LABEL, ""))) is not None:
            metrics.e2e_p95_ms_by_tier[sample.labels.get(TIER_LABEL) or NO_TIER] = sample.value
    for sample in query(url, promql["ttft_p95_ms"], at):
        if (metrics := versions.get(sample.labels.get(VLLM_VERSION_LABEL, ""))) is not None:
            metrics.ttft_p95_ms = sample.value
    return CanaryMetrics(versions[target.stable], versions[target.canary], window, at, promql)
