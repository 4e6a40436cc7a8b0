"""Every vLLM series the platform reads, checked against what vLLM 0.33.0 exposes, in its pinned
source release (platform_config/pins.py VLLM_SOURCE, read through tests/helpers.py vllm_source).

vLLM 0.33.0 defines the `vllm:` metrics of its OpenAI server in vllm/v1/metrics/loggers.py,
PrometheusStatLogger (`self._gauge_cls(name="vllm:...", labelnames=..., buckets=...)`, with the
default boundaries in vllm/v1/metrics/buckets.py since 0.2x; the
classes being prometheus_client's Gauge, Counter and Histogram; spec-decoding, KV-connector and
perf metrics live in other files, none of which the platform reads). prometheus_client exposes a
Counter as `<name>_total` and a Histogram as `<name>_bucket` (with `le`), `<name>_sum` and
`<name>_count`; a Gauge under its own name. tests/vllm_metrics_source.py reads them from the source.

What the platform reads: the `vllm:` selectors of every rendered object of the dev, staging and
prod previews (tests/golden/*.resources.json, which tests/test_golden_outputs.py holds to the
program: the SLO PrometheusRules, the dashboards, the prometheus-adapter rules), the canary
verdict's queries (platform_tools/canary.py `queries`), and what the endpoint picker's
`core-metrics-extractor` reads from each server (components/specs/endpoint_picker/picker_config.py
PICKER_VLLM_SERIES, llm-d-router v0.10.0's defaults, checked in its mirror)."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from components.specs.endpoint_picker.picker_config import PICKER_VLLM_SERIES, endpoint_picker_config
from components.specs.slo_rules import ITEM_LATENCY_BUCKETS_SECONDS, VLLM_TTFT_BUCKETS_SECONDS, latency_slo
from platform_config.profiles import PROFILES
from platform_tools.canary import Target, queries

from .canary_series import TTFT_BOUNDS
from .endpoint_picker_helpers import MIRROR as ROUTER_MIRROR
from .endpoint_picker_helpers import TAG as ROUTER_TAG
from .endpoint_picker_helpers import make_plan
from .helpers import ROOT, STACKS, load_json, mirror_show, vllm_source
from .slo_rules_helpers import TTFT_LE
from .vllm_metrics_source import LOGGERS, VllmMetric, _class, default_buckets, exposed_series, vllm_metrics

GOLDEN = ROOT / "tests" / "golden"

# Labels a series gains when Prometheus scrapes it through a PodMonitor or ServiceMonitor
# (prometheus-operator's target labels; `instance` and `job` are Prometheus's own). The monitors'
# own relabelings add more (monitor_target_labels).
OPERATOR_TARGET_LABELS = frozenset({"namespace", "pod", "container", "service", "endpoint", "job", "instance"})


@pytest.fixture(scope="module")
def exposed() -> dict[str, VllmMetric]:
    metrics = vllm_metrics()
    # The parse is not vacuous: the series the platform reads and their neighbours are found.
    assert len(metrics) > 30 and metrics["vllm:num_requests_running"].labels == {"model_name", "engine"}
    return metrics


# --- what the platform reads ----------------------------------------------------------------


@dataclass(frozen=True)
class Read:
    """One place the platform reads a vLLM series: the labels it matches or groups on, and its
    `le` matcher (operator, value) when it picks a bucket."""

    where: str
    series: str
    labels: frozenset[str]
    le: tuple[str, str] | None = None


NAMED = re.compile(r'\{__name__="(vllm:[\w:]+)"((?:,[^}]*)?)\}')
PLAIN = re.compile(r'(?<![\w:"])(vllm:[\w:]+)(\{[^}]*\})?')
MATCHER = re.compile(r'([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
# An aggregation directly over a vLLM selector, or over rate()/increase() of one.
GROUPED = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)\s*\((?:(?:rate|irate|increase)\()?(vllm:[\w:]+)")


def reads_in(where: str, text: str) -> Iterator[Read]:
    """The vLLM series a PromQL expression (or a prometheus-adapter seriesQuery or name regex) reads."""
    for pattern in (NAMED, PLAIN):
        for match in pattern.finditer(text):
            matchers = MATCHER.findall(match.group(2) or "")
            le = [(op, value) for label, op, value in matchers if label == "le"]
            yield Read(where, match.group(1), frozenset(label for label, _, _ in matchers), le[0] if le else None)
    for match in GROUPED.finditer(text):
        yield Read(where, match.group(2), frozenset(label.strip() for label in match.group(1).split(",") if label.strip()))


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """Every string inside a rendered object, with JSON documents held in strings (a dashboard in
    its ConfigMap) opened too."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{where}[{index}]")
    elif isinstance(value, str):
        if value.lstrip().startswith(("{", "[")):
            try:
                yield from _strings(json.loads(value), where)
                return
            except ValueError:
                pass
        yield where, value


def _dicts(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _dicts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _dicts(item)


def golden_resources(stack: str) -> list[dict[str, Any]]:
    resources: list[dict[str, Any]] = load_json(GOLDEN / f"{stack}.resources.json")
    return resources


def rendered_reads() -> list[Read]:
    """The vLLM series read by every object the previews render, in every stack, plus the labels
    prometheus-adapter's rules map to Kubernetes resources (`resources.overrides`)."""
    found: list[Read] = []
    for stack in STACKS:
        for resource in golden_resources(stack):
            name = f"{stack}:{resource['type']}:{resource['name']}"
            for where, text in _strings(resource.get("inputs"), name):
                found += reads_in(where, text)
            for rule in _dicts(resource.get("inputs")):
                series = NAMED.search(str(rule.get("seriesQuery", "")))
                if series and isinstance(rule.get("resources"), dict):
                    labels = frozenset(rule["resources"].get("overrides", {}))
                    found.append(Read(f"{name} (adapter resources)", series.group(1), labels))
    return found


def canary_reads() -> list[Read]:
    target = Target(namespace="team-a", app="llama-8b", served_name="org/llama", stable="v1", canary="v2")
    return [read for name, query in queries(target, "30m").items() for read in reads_in(f"canary {name}", query)]


def monitor_target_labels() -> frozenset[str]:
    """The labels the rendered PodMonitors and ServiceMonitors' relabelings write (model_version)."""
    return frozenset(
        rule["targetLabel"]
        for stack in STACKS
        for resource in golden_resources(stack)
        if resource["type"].startswith("kubernetes:monitoring.coreos.com/v1:") and resource["type"].endswith("Monitor")
        for rule in _dicts(resource.get("inputs"))
        if "targetLabel" in rule and not rule["targetLabel"].startswith("__")
    )


@pytest.mark.upstream_source
def test_every_vllm_series_the_platform_reads_is_one_vllm_exposes_with_those_labels(exposed):
    """Each series read is a name prometheus_client exposes for a 0.33.0 metric (the type's
    suffix included), defined unconditionally (a metric defined under an `if` may be absent), and
    every label it matches or groups on is the metric's own, `le` on a bucket, or one the scrape adds."""
    series = exposed_series(exposed)
    scrape = OPERATOR_TARGET_LABELS | monitor_target_labels()
    assert "model_version" in scrape
    reads = rendered_reads() + canary_reads()
    read_names = {r.series for r in reads}
    # Not vacuous: the rules, the adapter and the canary are all found.
    assert {
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:time_to_first_token_seconds_count",
        "vllm:generation_tokens_total",
        "vllm:num_requests_waiting",
    } <= read_names
    assert any(r.where.startswith("canary") for r in reads) and any("adapter" in r.where for r in reads)
    problems = []
    for read in reads:
        if read.series not in series:
            problems.append(f"{read.where}: {read.series} is no series vLLM 0.33.0 exposes")
            continue
        metric, labels = series[read.series]
        if metric.condition is not None:
            problems.append(f"{read.where}: {read.series} exists only when {metric.condition} ({LOGGERS}:{metric.line})")
        unknown = read.labels - labels - scrape
        if unknown:
            problems.append(f"{read.where}: {read.series} has no label {sorted(unknown)} ({LOGGERS}:{metric.line})")
    assert problems == []


def test_the_picker_reads_the_vllm_series_its_default_engine_names():
    """The picker's `core-metrics-extractor` is configured without parameters, so it reads
    llm-d-router v0.10.0's defaults for its default engine, vLLM: PICKER_VLLM_SERIES."""
    (extractor,) = [
        p for p in endpoint_picker_config(make_plan(lora_affinity=True))["plugins"] if p["type"] == "core-metrics-extractor"
    ]
    assert "parameters" not in extractor, "the picker's vLLM metric names are configured: check those instead"
    factories = mirror_show(ROUTER_MIRROR, ROUTER_TAG, "pkg/epp/framework/plugins/datalayer/extractor/metrics/factories.go")
    vllm_entry = re.search(r'Name:\s*"vllm",(.*?)\n\t\}', factories, re.S)
    assert vllm_entry is not None and 'defaultEngineName = "vllm"' in factories
    specs = dict(re.findall(r'(\w+Spec):\s*"([^"]*)"', vllm_entry.group(1)))
    assert set(specs) == {"QueuedRequestsSpec", "RunningRequestsSpec", "KVUsageSpec", "LoRASpec", "CacheInfoSpec"}, specs
    assert set(specs.values()) == set(PICKER_VLLM_SERIES)
    extractor_go = mirror_show(ROUTER_MIRROR, ROUTER_TAG, "pkg/epp/framework/plugins/datalayer/extractor/metrics/extractor.go")
    assert set(re.findall(r'LoraInfo\w+MetricName\s*=\s*"(\w+)"', extractor_go)) == PICKER_VLLM_SERIES[specs["LoRASpec"]]
    assert set(re.findall(r'CacheConfig\w+MetricName\s*=\s*"(\w+)"', extractor_go)) == PICKER_VLLM_SERIES[specs["CacheInfoSpec"]]


@pytest.mark.upstream_source
def test_the_vllm_series_the_endpoint_picker_reads_are_ones_vllm_exposes(exposed):
    """PICKER_VLLM_SERIES, read from the servers' exposition as vLLM writes it: the queue, running
    requests and KV-cache gauges, always there; the LoRA info gauge with exactly the labels the
    picker reads, which vLLM defines only when the server loads LoRA adapters (`lora_config`), the
    only servers the picker scores adapter affinity for; and the cache-config info gauge, whose
    labels are CacheConfig's fields (log_metrics_info: `metrics_info()` is CacheConfig's
    `__dict__`, vllm/config/cache.py)."""
    for name, labels in PICKER_VLLM_SERIES.items():
        metric = exposed[name]
        assert metric.kind == "gauge", metric
        if metric.labels is not None:
            assert labels <= metric.labels, (name, labels - metric.labels)
    for name in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"):
        assert exposed[name].condition is None
    lora = exposed["vllm:lora_requests_info"]
    assert lora.condition == "vllm_config.lora_config is not None", lora
    cache_info = exposed["vllm:cache_config_info"]
    assert cache_info.labels is None and cache_info.condition is None  # the keys of CacheConfig.metrics_info()
    cache = _class(ast.parse(vllm_source("vllm/config/cache.py")), "CacheConfig")
    assert "return {key: str(value) for key, value in self.__dict__.items()}" in ast.unparse(cache)
    fields = {s.target.id for s in cache.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    missing = PICKER_VLLM_SERIES["vllm:cache_config_info"] - fields
    assert not missing, missing


# --- histogram buckets ----------------------------------------------------------------------


def exposition_le(bound: float) -> str:
    """How prometheus_client writes a bucket's `le` (prometheus_client/utils.py floatToGoString:
    Python's repr of the float, below 1e6 where Go would switch to an exponent)."""
    assert 0 < bound < 1e6, bound
    return repr(float(bound))


def custom_buckets() -> dict[tuple[str, str], dict[str, list[float]]]:
    """The bucket families each model's servers replace (`--custom-histogram-buckets <JSON>` in their
    rendered arguments), by (stack, model): what its series' boundaries are instead of vLLM's defaults."""
    found: dict[tuple[str, str], dict[str, list[float]]] = {}
    for stack in STACKS:
        for resource in golden_resources(stack):
            for container in _dicts(resource.get("inputs")):
                args = container.get("args")
                if not isinstance(args, list) or "--custom-histogram-buckets" not in args:
                    continue
                labels = resource["inputs"].get("metadata", {}).get("labels", {})
                found[(stack, labels["app"])] = json.loads(args[args.index("--custom-histogram-buckets") + 1])
    return found


def boundaries_read(read: Read, metric: VllmMetric, custom: dict[tuple[str, str], dict[str, list[float]]]) -> tuple[float, ...]:
    """The boundaries of the histogram a read picks a bucket of: its family's as the read's model's
    servers replace them (a read in `<stack>:<type>:<model>-...`), else vLLM's own."""
    for (stack, model), families in custom.items():
        if read.where.startswith(f"{stack}:") and f":{model}-" in read.where and metric.family in families:
            return tuple(float(b) for b in families[metric.family])
    assert metric.buckets is not None, metric
    return metric.buckets


@pytest.mark.upstream_source
def test_every_bucket_the_rules_pick_is_a_boundary_of_its_vllm_histogram(exposed):
    """An `le` matcher on a vLLM bucket series matches exactly one of that histogram's 0.33.0
    boundaries (or of the ones the model's servers give its family), spelt as vLLM's client writes it
    (`1.0`, which Prometheus 3 keeps: an integral boundary's float spelling is already normalised)."""
    picked = [r for r in rendered_reads() + canary_reads() if r.le is not None]
    assert picked, "the SLO rules pick a TTFT bucket"
    custom = custom_buckets()
    problems = []
    for read in picked:
        assert read.le is not None
        metric = exposed[read.series.removesuffix("_bucket")]
        spelt = {exposition_le(b): b for b in boundaries_read(read, metric, custom)}
        op, value = read.le
        if op == "=":
            matched = [b for s, b in spelt.items() if s == value]
        elif op == "=~":
            pattern = re.compile(value.replace("\\\\", "\\"))
            matched = [b for s, b in spelt.items() if pattern.fullmatch(s)]
        else:
            matched = []
        if len(matched) != 1:
            problems.append(f"{read.where}: {read.series} le{op}{value!r} matches {matched} of {spelt}")
    assert problems == []


@pytest.mark.upstream_source
def test_the_ttft_buckets_the_platform_and_its_tests_assume_are_vllms(exposed):
    """components/specs/slo_rules.py's TTFT list (the boundaries targets are rounded to), the canary
    test's synthetic histogram and the SLO rule tests' series are vLLM 0.33.0's TTFT buckets."""
    buckets = exposed["vllm:time_to_first_token_seconds"].buckets
    assert buckets is not None and len(buckets) == 22
    assert VLLM_TTFT_BUCKETS_SECONDS == buckets
    assert tuple(TTFT_BOUNDS) == buckets
    assert TTFT_LE == tuple(exposition_le(b) for b in buckets)


@pytest.mark.upstream_source
def test_streaming_targets_are_judged_at_the_vllm_boundary_at_or_below_them(exposed):
    """A streaming profile's TTFT target is counted at the largest 0.33.0 boundary not above it:
    chat 500 ms and RAG 1 s are boundaries; code completion's 200 ms falls between 0.1 and 0.25 s
    and is judged at 100 ms (stricter), as docs/design/slo.md says."""
    buckets = exposed["vllm:time_to_first_token_seconds"].buckets
    assert buckets is not None
    thresholds = {}
    for profile in PROFILES.values():
        if profile.latency_sli != "ttft" or profile.ttft_target_ms is None:
            continue
        slo = latency_slo("ttft", profile.ttft_target_ms, 0.95)
        assert slo is not None
        expected = round(max(b for b in buckets if b * 1000 <= profile.ttft_target_ms) * 1000, 6)
        assert slo.threshold_ms == expected, (profile.name, slo.threshold_ms, expected)
        thresholds[profile.name] = (profile.ttft_target_ms, slo.threshold_ms)
    assert thresholds["code-completion"] == (200, 100)
    readme = " ".join((ROOT / "docs" / "design" / "slo.md").read_text().split())
    assert "code completion's 200 ms is judged at vLLM's 100 ms boundary" in readme


@pytest.mark.upstream_source
def test_an_embedding_items_latency_is_counted_on_the_buckets_its_servers_are_given(exposed):
    """Per item: `vllm:e2e_request_latency_seconds` draws from the `request_latency` family (vLLM 0.33.0
    loggers.py), whose defaults start at 0.3 s; a pooling server replaces the family with
    ITEM_LATENCY_BUCKETS_SECONDS, which hold the embeddings profile's 100 ms target as a boundary, so
    its objective is counted at the target itself."""
    metric = exposed["vllm:e2e_request_latency_seconds"]
    assert metric.family == "request_latency" and metric.buckets is not None and min(metric.buckets) == 0.3
    profile = PROFILES["embeddings"]
    assert profile.latency_sli == "item" and profile.ttft_target_ms == 100
    assert 0.1 in ITEM_LATENCY_BUCKETS_SECONDS and list(ITEM_LATENCY_BUCKETS_SECONDS) == sorted(set(ITEM_LATENCY_BUCKETS_SECONDS))
    slo = latency_slo(profile.latency_sli, profile.ttft_target_ms, profile.latency_objective)
    assert slo is not None and slo.threshold_ms == 100
    assert default_buckets()["request_latency"] == metric.buckets
