"""The prometheus-adapter rules' queries, rendered as the adapter renders them and evaluated by a
real Prometheus holding synthetic vLLM, DCGM and endpoint-picker series: each gives the per-pod
(or per-pool) value the HPAs' targets mean, and nothing of another pod, version or namespace.

How the adapter fills a rule's `metricsQuery` (kubernetes-sigs/prometheus-adapter at v0.12.0, the
appVersion of the pinned chart 5.3.0): pkg/naming/metrics_query.go `metricsQuery.Build` is handed
the discovered series name, the namespace and the object names the HPA asks about (pkg/custom-
provider/provider.go buildQuery → series_registry.go QueryForMetric). It sets `Series` to the
series name; `LabelMatchers` to the namespace matcher followed by the resource matcher, joined by
"," — `namespace="<ns>"` (the label `resources.overrides` maps to namespaces), then `pod="<name>"`
for one name or `pod=~"<a>|<b>"` for several (pkg/client/helpers.go LabelEq / LabelMatches, Go
`%q` quoting); and `GroupBy` to the resource's label alone (no extra group-by for custom
metrics). The HPA's Pods metric carries no metric selector, so no other matcher is added. The
answer is matched back to the objects by that label (series_registry.go MatchValuesToNames).
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from components.specs.metrics import (
    EPP_POOL_LABEL,
    EPP_QUEUE_SERIES,
    EPP_SATURATION_SERIES,
    INFERENCE_POOL_GROUP,
    adapter_rules,
)

from .helpers import Evaluated, raw_stack
from .servers.prometheus import SyntheticSeries, prometheus_with

HOUR = 3600
# Backfilled data must lie in the past: the series end on an hour two hours ago.
END = (int(time.time()) // HOUR - 2) * HOUR
START = END - 10 * 60

NAMESPACE, OTHER_NAMESPACE = "serving", "team-a"
# The two pods of the version the HPA scales, and a pod of another version beside them.
POD_A, POD_B, OTHER_VERSION_POD = "llama-70b-v1-5d9f-a", "llama-70b-v1-5d9f-b", "llama-70b-v2-7c4e-a"
IDLE_POD = "llama-70b-v1-5d9f-c"
POOL, IDLE_POOL, NEGATIVE_POOL, ABSENT_POOL = "llama-70b-v1", "llama-1b-v1", "llama-8b-v1", "llama-3b-v1"


def _quote(value: str) -> str:
    # Go's %q; for the ASCII names of Kubernetes objects it is JSON's quoting.
    return json.dumps(value)


def render(rule: dict[str, Any], namespace: str, names: list[str]) -> str:
    """The PromQL the adapter sends for `names` in `namespace` (see the module docstring:
    pkg/naming/metrics_query.go Build at v0.12.0)."""
    series = rule["name"]["matches"].removeprefix("^").removesuffix("$")
    overrides = rule["resources"]["overrides"]
    namespace_label = next(label for label, res in overrides.items() if res == {"resource": "namespace"})
    resource_label = next(label for label in overrides if label != namespace_label)
    if len(names) == 1:
        resource_matcher = f"{resource_label}={_quote(names[0])}"
    else:
        resource_matcher = f"{resource_label}=~{_quote('|'.join(names))}"
    args = {
        "Series": series,
        "LabelMatchers": ",".join([f"{namespace_label}={_quote(namespace)}", resource_matcher]),
        "GroupBy": resource_label,
    }
    query = re.sub(r"<<\s*\.(\w+)\s*>>", lambda field: args[field.group(1)], rule["metricsQuery"])
    assert "<<" not in query and ">>" not in query, query
    return query


def _rule(exposed: str) -> dict[str, Any]:
    return next(r for r in adapter_rules(epp_queue=True)["custom"] if r["name"]["as"] == exposed)


def synthetic() -> SyntheticSeries:
    data = SyntheticSeries()

    def vllm(name: str, pod: str, value: float, namespace: str = NAMESPACE, engine: str = "0") -> None:
        labels = {"namespace": namespace, "pod": pod, "model_name": "llama-3.1-70b-instruct", "engine": engine}
        data.gauge(name, labels, START, END, value)

    # Pod A runs two engines (data parallel): its queue is theirs together, its cache their mean.
    vllm("vllm:num_requests_waiting", POD_A, 4, engine="0")
    vllm("vllm:num_requests_waiting", POD_A, 2, engine="1")
    vllm("vllm:num_requests_waiting", POD_B, 2)
    vllm("vllm:num_requests_running", POD_A, 3, engine="0")
    vllm("vllm:num_requests_running", POD_A, 5, engine="1")
    vllm("vllm:num_requests_running", POD_B, 1)
    vllm("vllm:kv_cache_usage_perc", POD_A, 0.6, engine="0")
    vllm("vllm:kv_cache_usage_perc", POD_A, 0.4, engine="1")
    vllm("vllm:kv_cache_usage_perc", POD_B, 0.25)
    # Decoys: another version's pod in the namespace, and a pod of the same name in another one.
    for name in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"):
        vllm(name, OTHER_VERSION_POD, 50)
        vllm(name, POD_A, 100, namespace=OTHER_NAMESPACE)

    # vLLM's TTFT histogram: pod A's slowest 1% between 1 s and 2.5 s (its P99 at the 2.5 s boundary), pod B's by
    # 0.25 s; the decoys slower still.
    def ttft(pod: str, shares: dict[float, float], namespace: str = NAMESPACE, per_second: float = 2.0) -> None:
        labels = {"namespace": namespace, "pod": pod, "model_name": "llama-3.1-70b-instruct", "engine": "0"}
        data.histogram("vllm:time_to_first_token_seconds", labels, sorted(shares), shares.__getitem__, START, END, per_second)
        data.counter("vllm:time_to_first_token_seconds_count", labels, START, END, per_second, base=per_second * 3600)

    slow = {0.1: 0.5, 0.25: 0.8, 0.5: 0.9, 1.0: 0.95, 2.5: 0.99, 5.0: 1.0}
    ttft(POD_A, slow)
    ttft(POD_B, {0.1: 0.9, 0.25: 0.99, 0.5: 1.0, 1.0: 1.0, 2.5: 1.0, 5.0: 1.0})
    ttft(OTHER_VERSION_POD, {0.1: 0.0, 0.25: 0.0, 0.5: 0.0, 1.0: 0.0, 2.5: 0.0, 5.0: 0.5})
    ttft(POD_A, {0.1: 0.0, 0.25: 0.0, 0.5: 0.0, 1.0: 0.0, 2.5: 0.0, 5.0: 0.5}, namespace=OTHER_NAMESPACE)
    # A replica of the version that has answered nothing yet: its counters flat, a quantile of nothing.
    ttft(IDLE_POD, slow, per_second=0.0)

    # DCGM exporter series as scraped with honorLabels: its own pod/namespace/container labels
    # name the pod holding the GPU (MIG adds GPU_I_ID and GPU_I_PROFILE per GPU instance).
    def dcgm(gpu: str, value: float, pod: str | None, namespace: str = NAMESPACE, **extra: str) -> None:
        labels = {"gpu": gpu, "UUID": f"GPU-{gpu}", "Hostname": "ip-10-0-1-7", "modelName": "NVIDIA H100 80GB HBM3"}
        if pod is not None:
            labels |= {"pod": pod, "namespace": namespace, "container": "vllm"}
        data.gauge("DCGM_FI_PROF_GR_ENGINE_ACTIVE", {**labels, **extra}, START, END, value)

    dcgm("0", 0.8, POD_A)
    dcgm("1", 0.3, POD_B, GPU_I_ID="1", GPU_I_PROFILE="3g.40gb")
    dcgm("1", 0.5, POD_B, GPU_I_ID="2", GPU_I_PROFILE="3g.40gb")
    dcgm("2", 0.0, None)  # an idle GPU no pod holds
    dcgm("3", 0.9, OTHER_VERSION_POD)
    dcgm("4", 0.1, POD_B, namespace=OTHER_NAMESPACE)

    # The endpoint picker: two EPP replicas of POOL, queues in two priority bands.
    def epp(name: str, pool: str, value: float, namespace: str = NAMESPACE, replica: str = "a", **extra: str) -> None:
        labels = {"namespace": namespace, "pod": f"{pool}-epp-{replica}", EPP_POOL_LABEL: pool, **extra}
        data.gauge(name, labels, START, END, value)

    for replica in ("a", "b"):
        epp(EPP_SATURATION_SERIES, POOL, 0.4, replica=replica)
    epp(EPP_QUEUE_SERIES, POOL, 3, replica="a", priority="0", fairness_id="team-a", model_name="m", target_model_name="m")
    epp(EPP_QUEUE_SERIES, POOL, 4, replica="a", priority="1", fairness_id="team-b", model_name="m", target_model_name="m")
    epp(EPP_QUEUE_SERIES, POOL, 1, replica="b", priority="0", fairness_id="team-a", model_name="m", target_model_name="m")
    # A pool of the same name in another namespace.
    epp(EPP_SATURATION_SERIES, POOL, 0.9, namespace=OTHER_NAMESPACE)
    epp(EPP_QUEUE_SERIES, POOL, 100, namespace=OTHER_NAMESPACE, priority="0")
    # A live EPP with nothing queued (its idle flows collected): saturation only.
    epp(EPP_SATURATION_SERIES, IDLE_POOL, 0.0)
    # A flow collected while a request revived it: the gauge briefly negative.
    epp(EPP_SATURATION_SERIES, NEGATIVE_POOL, 0.0)
    epp(EPP_QUEUE_SERIES, NEGATIVE_POOL, -1, priority="0")
    return data


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory) -> Iterator[str]:
    with prometheus_with(synthetic(), tmp_path_factory.mktemp("prometheus")) as url:
        yield url


def evaluate(url: str, query: str, label: str) -> dict[str, float]:
    """The instant query at END, as the adapter reads it: one value per `label` value."""
    params = urllib.parse.urlencode({"query": query, "time": END})
    with urllib.request.urlopen(f"{url}/api/v1/query?{params}", timeout=10) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    assert body["data"]["resultType"] == "vector", body
    values = {}
    for sample in body["data"]["result"]:
        # Grouped by the resource label only: nothing else survives to confuse the matching.
        assert set(sample["metric"]) == {label}, (query, sample)
        values[sample["metric"][label]] = float(sample["value"][1])
    return values


def test_the_rendering_follows_the_adapter():
    query = render(_rule("vllm_num_requests_waiting"), NAMESPACE, [POD_A, POD_B])
    assert query == f'sum(vllm:num_requests_waiting{{namespace="serving",pod=~"{POD_A}|{POD_B}"}}) by (pod)'
    assert render(_rule("vllm_num_requests_waiting"), NAMESPACE, [POD_A]).endswith(f'pod="{POD_A}"}}) by (pod)')


@pytest.mark.real_server
@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        # HPA AverageValue targets on these are per pod: requests waiting, requests running.
        ("vllm_num_requests_waiting", {POD_A: 6, POD_B: 2}),
        ("vllm_num_requests_running", {POD_A: 8, POD_B: 1}),
        # vLLM reports a fraction (1 = 100%); the metric is a percentage.
        ("vllm_kv_cache_usage_percent", {POD_A: 50, POD_B: 25}),
        # DCGM's engine-active fraction as a percentage; the two MIG instances of pod B averaged.
        ("gpu_engine_active_percent", {POD_A: 80, POD_B: 40}),
        # Each pod's own P99 time to first token, in seconds, over five minutes of its requests.
        ("vllm_time_to_first_token_p99_seconds", {POD_A: 2.5, POD_B: 0.25}),
    ],
)
def test_each_pods_metric_is_the_pods_own_value(prometheus, metric, expected):
    rule = _rule(metric)
    assert evaluate(prometheus, render(rule, NAMESPACE, [POD_A, POD_B]), "pod") == pytest.approx(expected)
    # A selection of one pod (an Equals matcher rather than a regex) reads the same.
    assert evaluate(prometheus, render(rule, NAMESPACE, [POD_B]), "pod") == pytest.approx({POD_B: expected[POD_B]})


@pytest.mark.real_server
def test_a_pod_that_answered_nothing_has_no_latency_rather_than_nan(prometheus):
    """histogram_quantile of no requests is NaN: the rule gives such a pod no value, which the HPA leaves out."""
    query = render(_rule("vllm_time_to_first_token_p99_seconds"), NAMESPACE, [POD_A, IDLE_POD])
    assert evaluate(prometheus, query, "pod") == pytest.approx({POD_A: 2.5})
    assert evaluate(prometheus, render(_rule("vllm_time_to_first_token_p99_seconds"), NAMESPACE, [IDLE_POD]), "pod") == {}


@pytest.mark.real_server
def test_the_endpoint_pickers_queue_is_the_pools_total_and_zero_when_idle(prometheus):
    rule = _rule("epp_flow_control_queue_size")
    assert rule["resources"]["overrides"][EPP_POOL_LABEL]["group"] == INFERENCE_POOL_GROUP

    def value(pool: str) -> dict[str, float]:
        # An Object metric: GetMetricByName, so one name and an Equals matcher.
        return evaluate(prometheus, render(rule, NAMESPACE, [pool]), EPP_POOL_LABEL)

    # Summed over priority bands, fairness flows and EPP replicas; the other namespace's not.
    assert value(POOL) == {POOL: 8}
    assert value(IDLE_POOL) == {IDLE_POOL: 0}
    assert value(NEGATIVE_POOL) == {NEGATIVE_POOL: 0}
    # No EPP series at all: no value, so the HPA holds rather than scale on a missing signal.
    assert value(ABSENT_POOL) == {}


PROD_TOKENS = json.dumps({"serving": "hf_serving_token", "team-a": "hf_team_a_token"})


def test_every_metric_an_hpa_asks_for_is_one_the_adapter_serves():
    prod = Evaluated(raw_stack("prod"), secrets={"inference-platform:huggingFaceTokens": PROD_TOKENS})
    rules = prod.one("kubernetes:helm.sh/v3:Release", "prometheus-adapter-release")["inputs"]["values"]["rules"]["custom"]
    served_for = {
        (rule["name"]["as"], resource.get("group", ""), resource["resource"])
        for rule in rules
        for label, resource in rule["resources"]["overrides"].items()
        if resource["resource"] != "namespace"
    }
    asked = set()
    hpas = [m for m in prod.manifests() if m["kind"] == "HorizontalPodAutoscaler"]
    assert hpas
    for hpa in hpas:
        for metric in hpa["spec"]["metrics"]:
            if metric["type"] == "Pods":
                asked.add((metric["pods"]["metric"]["name"], "", "pods"))
            elif metric["type"] == "Object":
                described = metric["object"]["describedObject"]
                assert described["kind"] == "InferencePool", described
                group = described["apiVersion"].split("/")[0]
                asked.add((metric["object"]["metric"]["name"], group, "inferencepools"))
            else:
                assert metric["type"] == "Resource", metric
    # The adapter's rules name the pod resource `pod`; Kubernetes resolves it to `pods`.
    served = {(name, group, "pods" if resource == "pod" else resource) for name, group, resource in served_for}
    assert asked <= served, asked - served
    # Both kinds of target are in use, so the check is not vacuous.
    assert {kind for _, _, kind in asked} == {"pods", "inferencepools"}
