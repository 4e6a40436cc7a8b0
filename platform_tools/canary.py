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
  (components/serving.py ServerPlan.labels). `tier` is the label the mesh's Telemetry adds from
  the tier header; a request without one counts under "(no tier)". Error rate: answers 5xx
  other than 503, over all answers; shed rate: 503 answers over all answers (code 0, a
  request the client abandoned, is neither).
- Requests the version's endpoint picker path refused (versions behind a picker only; they never
  reach a pod, so the sidecar's counts above miss them), per version and tier: `sum by
  (destination_workload, tier) (increase(istio_requests_total{reporter="destination",
  destination_workload_namespace="<tenant>", destination_workload=~"<pickers>", response_code="429"}
  [<window>]))`, what the sidecar of each version's picker pods reports. Every refusal of the picker
  path leaves the picker's proxy as 429 with `x-llm-d-request-dropped-reason`, which the gateway
  filter answers 503 (components/specs/endpoint_picker.py REFUSED): the picker's own (a queue TTL or
  a band's cap, 429; no endpoints, 503 turned 429 by the proxy; llm-d router v0.10.0
  pkg/common/error/error.go) and the proxy's (the tier's queue timeout, the picker unreachable). The
  servers never answer 429 (vLLM 0.33.0's OpenAI server has no such answer), so the picked
  requests' own answers, which pass the same sidecar, are never counted twice. Each counts as a
  request and a 503 of its version and tier. `destination_workload` is the picker's Deployment
  (components/specs/endpoint_picker.py epp_name_of); `tier` is the Telemetry's, as above.
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
  pod label the PodMonitor/ServiceMonitor relabels in (components/specs/pod.py
  merged_metrics_relabelings).

Verdict rules (`verdict`), in order:

1. Hold when the canary or the stable version answered fewer than `minRequests` requests in
   the window (at canaryWeight 100 the stable version takes no traffic: only the canary's count
   is needed, and it is judged on its own, against the limits and the target only).
2. Roll back on any breach, over all tiers and in each tier where both versions answered at
   least `minRequests` (a tier with fewer is shown but not judged: a handful of requests makes
   any rate noise; its requests still count in the all-tiers rows):
   a. the canary's error rate (5xx but 503) exceeds `maxErrorRate` and the stable version's;
   b. its shed rate (503) exceeds `maxShedRate` and the stable version's;
   c. its TTFT p95 or end-to-end p95 exceeds `maxLatencyRatio` x the stable version's (TTFT
      over all tiers only);
   d. its TTFT p95 is above the profile's `ttft_target_ms` while the stable version's is within.
3. Hold when a latency figure needed for (c) or (d) is missing (no samples: the scrape is
   broken, not the canary proven good).
4. Otherwise promote: the next of `release.steps`, or at 100 the canary becomes stable.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

from platform_config.models import CanaryAnalysis, ReleaseConfig

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
ALL_TIERS = "all tiers"

Action = Literal["promote", "hold", "rollback"]
Outcome = Literal["ok", "breach", "too few", "not judged", "missing"]


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


# --- Prometheus ------------------------------------------------------------------------------


class PrometheusError(Exception):
    """Prometheus could not be reached or refused a query: said with its URL, no traceback."""


def check_url(url: str) -> str:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise PrometheusError(
            f"--prometheus {url!r} is not an http(s) URL such as http://prometheus-operated.monitoring.svc:9090"
        )
    return url.rstrip("/")


# An instant query over a few versions and tiers answers a few KiB; far more is not Prometheus.
MAX_ANSWER_BYTES = 4 << 20


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    # None: no number (NaN, e.g. a quantile over no observations).
    value: float | None


def query(url: str, promql: str, at: float, timeout: float = 15.0) -> list[Sample]:
    """An instant query's result vector (Prometheus HTTP API /api/v1/query), each sample checked:
    an answer of any other shape is a PrometheusError, never a crash."""
    params = urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}"})
    request = urllib.request.Request(f"{url}/api/v1/query?{params}", headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - http(s) only, checked
            body = _json(response.read(MAX_ANSWER_BYTES + 1), url, promql)
    except urllib.error.HTTPError as error:
        try:
            body = _json(error.read(MAX_ANSWER_BYTES + 1), url, promql)
        except (PrometheusError, OSError):
            raise PrometheusError(f"Prometheus at {url} answered HTTP {error.code} to the query {promql}") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise PrometheusError(f"cannot query Prometheus at {url} (--prometheus / PROMETHEUS_URL): {reason}") from None
    if not isinstance(body, dict) or body.get("status") != "success":
        detail = body.get("error") if isinstance(body, dict) else body
        raise PrometheusError(f"Prometheus at {url} refused the query {promql}: {str(detail)[:300]}")
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        shown = data.get("resultType") if isinstance(data, dict) else type(data).__name__
        raise PrometheusError(f"Prometheus at {url} answered {str(shown)[:100]!r}, not a vector, to {promql}")
    return [_sample(entry, url, promql) for entry in data["result"]]


def _json(data: bytes, url: str, promql: str) -> Any:
    if len(data) > MAX_ANSWER_BYTES:
        raise PrometheusError(f"Prometheus at {url} answered more than {MAX_ANSWER_BYTES >> 20} MiB to {promql}")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise PrometheusError(f"Prometheus at {url} answered something that is not JSON to {promql}") from None


def _sample(entry: Any, url: str, promql: str) -> Sample:
    """One vector sample: {"metric": {label: value}, "value": [time, "<number>"]}."""
    labels = entry.get("metric") if isinstance(entry, dict) else None
    pair = entry.get("value") if isinstance(entry, dict) else None
    if (
        isinstance(labels, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())
        and isinstance(pair, list)
        and len(pair) == 2
        and isinstance(pair[1], str)
    ):
        try:
            value = float(pair[1])
        except ValueError:
            pass
        else:
            return Sample(labels, None if math.isnan(value) else value)
    raise PrometheusError(f"Prometheus at {url} answered a sample that is not one to {promql}: {str(entry)[:200]}")


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


# --- the verdict -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One figure of both versions beside its limit."""

    name: str
    scope: str
    stable: float | None
    canary: float | None
    limit: str
    outcome: Outcome
    unit: Literal["requests", "rate", "ms"]


@dataclass(frozen=True)
class Verdict:
    action: Action
    reasons: tuple[str, ...]
    checks: tuple[Check, ...]


def _show(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "rate":
        return f"{100 * value:.2f}%"
    if unit == "ms":
        return f"{value:.0f} ms"
    return f"{value:.0f}"


def verdict(metrics: CanaryMetrics, analysis: CanaryAnalysis, ttft_target_ms: int | None, canary_weight: int) -> Verdict:
    """The rules of the module docstring, on figures already read: a pure function."""
    stable, canary = metrics.stable, metrics.canary
    alone = canary_weight == 100
    need = analysis.min_requests
    checks: list[Check] = []
    holds: list[str] = []
    breaches: list[str] = []
    missing: list[str] = []

    def add(check: Check, reason: str) -> None:
        checks.append(check)
        if check.outcome == "breach":
            breaches.append(f"{check.scope}: {reason}")
        elif check.outcome == "missing":
            missing.append(f"{check.scope}: {reason}")

    # 1. Enough traffic.
    limit = f">= {need} (canary alone at weight 100)" if alone else f">= {need} each"
    short = canary.total.requests < need or (not alone and stable.total.requests < need)
    checks.append(
        Check(
            "requests", ALL_TIERS, stable.total.requests, canary.total.requests, limit, "too few" if short else "ok", "requests"
        )
    )
    if short:
        holds.append(
            f"too few requests in {metrics.window}: stable {stable.total.requests:.0f}, canary {canary.total.requests:.0f}, "
            f"need {need}{'' if not alone else ' (canary)'}"
            + (
                ""
                if stable.total.requests or canary.total.requests
                else "; no requests at all: are the pods scraped, and do the labels match the queries (--json)?"
            )
        )
    judged: list[str] = []
    for tier in sorted(set(stable.tiers) | set(canary.tiers)):
        s, c = stable.tiers.get(tier, Traffic()), canary.tiers.get(tier, Traffic())
        enough = c.requests >= need and (alone or s.requests >= need)
        if enough:
            judged.append(tier)
        checks.append(
            Check(
                "requests", tier, s.requests, c.requests, f"{limit} to judge the tier", "ok" if enough else "too few", "requests"
            )
        )

    # 2a, 2b. Error and shed rates.
    def rate_rule(name: str, scope: str, s: Traffic, c: Traffic, kind: str, ceiling: float) -> None:
        s_rate, c_rate = (s.error_rate, c.error_rate) if kind == "errors" else (s.shed_rate, c.shed_rate)
        if c_rate is None:
            add(Check(name, scope, s_rate, c_rate, "", "not judged", "rate"), "")
            return
        over = c_rate > ceiling and (alone or s_rate is None or c_rate > s_rate)
        text = f"<= {100 * ceiling:.2f}%" + ("" if alone else " or <= stable")
        add(
            Check(name, scope, s_rate, c_rate, text, "breach" if over else "ok", "rate"),
            f"canary {name} {_show(c_rate, 'rate')} > {_show(ceiling, 'rate')}"
            + ("" if alone else f" and > stable's {_show(s_rate, 'rate')}"),
        )

    scopes = [(ALL_TIERS, stable.total, canary.total)] + [
        (t, stable.tiers.get(t, Traffic()), canary.tiers.get(t, Traffic())) for t in judged
    ]
    for scope, s, c in scopes:
        rate_rule("5xx rate (not 503)", scope, s, c, "errors", analysis.max_error_rate)
        rate_rule("503 rate", scope, s, c, "shed", analysis.max_shed_rate)

    # 2c. Latency against the stable version's.
    ratio = analysis.max_latency_ratio

    def ratio_rule(name: str, scope: str, s: float | None, c: float | None, required: bool) -> None:
        if alone:
            checks.append(Check(name, scope, s, c, "no stable traffic to compare", "not judged", "ms"))
            return
        if s is None or c is None:
            outcome: Outcome = "missing" if required else "not judged"
            add(
                Check(name, scope, s, c, f"<= {ratio:g} x stable", outcome, "ms"),
                f"no {name} figure for the {'stable' if s is None else 'canary'} version",
            )
            return
        over = c > ratio * s
        add(
            Check(name, scope, s, c, f"<= {ratio:g} x stable = {ratio * s:.0f} ms", "breach" if over else "ok", "ms"),
            f"canary {name} {c:.0f} ms > {ratio:g} x stable's {s:.0f} ms",
        )

    ratio_rule("TTFT p95 (vLLM, no tier)", ALL_TIERS, stable.ttft_p95_ms, canary.ttft_p95_ms, True)
    ratio_rule("e2e p95", ALL_TIERS, stable.e2e_p95_ms, canary.e2e_p95_ms, True)
    for tier in judged:
        ratio_rule("e2e p95", tier, stable.e2e_p95_ms_by_tier.get(tier), canary.e2e_p95_ms_by_tier.get(tier), False)

    # 2d. TTFT against the profile's target.
    if ttft_target_ms is not None:
        s_ttft, c_ttft = stable.ttft_p95_ms, canary.ttft_p95_ms
        name = "TTFT p95 vs target"
        text = f"<= {ttft_target_ms} ms" + ("" if alone else " unless stable misses it too")
        if c_ttft is None or (not alone and s_ttft is None):
            add(Check(name, ALL_TIERS, s_ttft, c_ttft, text, "missing", "ms"), "no TTFT figure")
        else:
            over = c_ttft > ttft_target_ms and (alone or (s_ttft is not None and s_ttft <= ttft_target_ms))
            add(
                Check(name, ALL_TIERS, s_ttft, c_ttft, text, "breach" if over else "ok", "ms"),
                f"canary TTFT p95 {c_ttft:.0f} ms > target {ttft_target_ms} ms"
                + ("" if alone else f" while stable's {_show(s_ttft, 'ms')} is within"),
            )

    if holds:
        return Verdict("hold", tuple(holds), tuple(checks))
    if breaches:
        return Verdict("rollback", tuple(breaches), tuple(checks))
    if missing:
        return Verdict("hold", tuple(missing), tuple(checks))
    return Verdict("promote", ("every check within its limit",), tuple(checks))


# --- the next step -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """What the verdict does to the release: a new canary weight, or the canary made stable."""

    action: Action
    weight: int
    # The canary's weight after the step; None: the canary becomes the stable version.
    new_weight: int | None

    @property
    def changes(self) -> bool:
        return self.new_weight != self.weight

    def describe(self, release: ReleaseConfig) -> str:
        if self.new_weight is None:
            return f"stable: {release.stable} -> {release.canary} (canary at 100%; the canary entries are removed)"
        if not self.changes:
            return f"no change (canary weight stays {self.weight})"
        return f"canary weight {self.weight} -> {self.new_weight}"


def next_step(release: ReleaseConfig, action: Action) -> Step:
    weight = release.canary_weight
    if action == "rollback":
        return Step(action, weight, 0)
    if action == "hold":
        return Step(action, weight, weight)
    if weight >= release.steps[-1]:
        return Step(action, weight, None)
    return Step(action, weight, min(s for s in release.steps if s > weight))


# --- the report --------------------------------------------------------------------------------


def _finite(value: Any) -> Any:
    """JSON has no infinity (a p95 in the +Inf bucket): null; the check still says breach."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Report:
    stack: str
    model: str
    namespace: str
    release: ReleaseConfig
    profile: str
    ttft_target_ms: int | None
    metrics: CanaryMetrics
    verdict: Verdict
    step: Step

    def at_text(self) -> str:
        return datetime.fromtimestamp(self.metrics.at, tz=timezone.utc).isoformat().replace("+00:00", "Z")

    def to_json(self) -> dict[str, Any]:
        release = self.release
        return {
            "stack": self.stack,
            "model": self.model,
            "namespace": self.namespace,
            "stable": release.stable,
            "canary": release.canary,
            "canaryWeight": release.canary_weight,
            "window": self.metrics.window,
            "at": self.at_text(),
            "profile": self.profile,
            "ttftTargetMs": self.ttft_target_ms,
            "verdict": self.verdict.action,
            "reasons": list(self.verdict.reasons),
            "nextStep": {
                "canaryWeight": self.step.new_weight,
                "stable": release.canary if self.step.new_weight is None else release.stable,
                "changes": self.step.changes,
                "description": self.step.describe(release),
            },
            "checks": [_finite(asdict(c)) for c in self.verdict.checks],
            "metrics": {"stable": _finite(asdict(self.metrics.stable)), "canary": _finite(asdict(self.metrics.canary))},
            "queries": self.metrics.queries,
        }

    def text(self) -> str:
        release = self.release
        target = f"TTFT target {self.ttft_target_ms} ms" if self.ttft_target_ms is not None else "no TTFT target"
        lines = [
            f"{self.model} in stack {self.stack} (namespace {self.namespace}): stable {release.stable}, "
            f"canary {release.canary} at {release.canary_weight}%",
            f"window {self.metrics.window} ending {self.at_text()}; profile {self.profile}, {target}; "
            f"at least {release.analysis.min_requests} requests",
            "",
        ]
        header = ("check", "scope", f"stable {release.stable}", f"canary {release.canary}", "limit", "result")
        rows = [header] + [
            (c.name, c.scope, _show(c.stable, c.unit), _show(c.canary, c.unit), c.limit, c.outcome) for c in self.verdict.checks
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        for row in rows:
            lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        lines.append("")
        lines.append(f"verdict: {self.verdict.action.upper()}: {self.step.describe(release)}")
        lines.extend(f"  - {reason}" for reason in self.verdict.reasons)
        return "\n".join(lines)
