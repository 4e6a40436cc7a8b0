"""prometheus-adapter rules: vLLM's queue and DCGM's GPU activity as custom (Pods) metrics, and
the llm-d endpoint picker's flow-control queue as a custom metric of its InferencePool (Object).

HPA `Resource` metrics are cpu and memory only; GPU metrics reach an HPA through Prometheus and
this adapter. DCGM_FI_PROF_GR_ENGINE_ACTIVE (0..1) is used for GPU activity because
DCGM_FI_DEV_GPU_UTIL is not reported for MIG slices; with honorLabels the exporter's `pod` and
`namespace` labels name the pod that holds the GPU.

The vLLM series are gauges of vLLM 0.33.0 (its source release, vllm/v1/metrics/loggers.py
PrometheusStatLogger: `vllm:num_requests_waiting`, `vllm:num_requests_running`,
`vllm:kv_cache_usage_perc` with labels model_name and engine; `namespace` and `pod` come from the
scrape), checked there by tests/test_vllm_metrics.py.

Rule format: kubernetes-sigs/prometheus-adapter docs/config.md at v0.12.0, the appVersion of the
pinned prometheus-adapter chart 5.3.0 (`resources.overrides` maps a label to a group-resource,
`{group, resource}`; `metricsQuery` is a Go template with `<<` `>>` delimiters).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

# The custom metrics' names: what the HPAs of the `hpa` backend ask for.
QUEUE_METRIC = "vllm_num_requests_waiting"
GPU_METRIC = "gpu_engine_active_percent"
# Each pod's P99 time to first token over RATE_WINDOW, in seconds, from vLLM 0.33.0's histogram
# `vllm:time_to_first_token_seconds` (vllm/v1/metrics/loggers.py histogram_time_to_first_token): what an HPA
# with `autoscaling.hpa.ttftP99TargetMs` averages over a version's pods. Five minutes of requests, so that a
# few slow ones do not move it (the HPA's scale-up stabilization holds it further).
TTFT_P99_SERIES = "vllm:time_to_first_token_seconds_bucket"
TTFT_P99_METRIC = "vllm_time_to_first_token_p99_seconds"
TTFT_P99_RATE_WINDOW = "5m"
TTFT_P99_COUNT_SERIES = "vllm:time_to_first_token_seconds_count"
# Only for pods that answered in the window: a quantile of no requests is NaN, which the HPA must not read (a pod
# without a value is left out of its average instead: a new replica not yet routed to, an idle version).
TTFT_P99_QUERY = (
    f"histogram_quantile(0.99, sum(rate(<<.Series>>{{<<.LabelMatchers>>}}[{TTFT_P99_RATE_WINDOW}])) by (le, <<.GroupBy>>))"
    f" and on (<<.GroupBy>>) (sum(rate({TTFT_P99_COUNT_SERIES}{{<<.LabelMatchers>>}}[{TTFT_P99_RATE_WINDOW}]))"
    " by (<<.GroupBy>>) > 0)"
)


def promql_string(value: str) -> str:
    """A value config gives (a tenant, model, pool or job name) as a PromQL string literal: double-quoted, with the
    escapes Go's strconv.Unquote reads (JSON's, for printable ASCII), so no value can end the matcher; anything not
    printable ASCII is refused, whatever the config's patterns already allow."""
    if not (value.isascii() and value.isprintable()):
        raise ValueError(f"{value!r} is not printable ASCII: no PromQL label value here holds another")
    return json.dumps(value)


def plain_name(name: str) -> str:
    """A name inside a PromQL regular expression: letters, digits, '_' and '-' only, which RE2 reads as themselves
    (a name with any other character is refused, not escaped)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise ValueError(f"{name!r} is not a plain name: a PromQL regular expression here holds letters, digits, '_', '-'")
    return name


def promql_names(names: Iterable[str]) -> str:
    """Names as a regular-expression matcher's value (`=~`): their alternatives, each a plain name."""
    return promql_string("|".join(plain_name(name) for name in names))


def ksm_label(key: str) -> str:
    """kube-state-metrics' name of a Kubernetes label on its `kube_*_labels` series:
    `label_<sanitised key>`, every character outside [a-zA-Z0-9_] becoming `_`. It exports a
    label only when `--metric-labels-allowlist` allows it (components/monitoring.py)."""
    return "label_" + "".join(c if c.isalnum() or c == "_" else "_" for c in key)


POD_RESOURCES = {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}}

# --- the endpoint picker's flow-control queue (llm-d/llm-d-router v0.10.0) --------------------
# The EPP's gauge of requests held in its flow-control queue, while they wait for dispatch
# (pkg/epp/metrics/llm_d_router_metrics.go `llmdFlowControlQueueSize`: subsystem `llm_d_epp`,
# labels fairness_id, priority, inference_pool, model_name, target_model_name; incremented on
# enqueue and decremented when the request leaves the queue, pkg/epp/flowcontrol/controller/
# controller.go EnqueueAndWait). Only exported with the `flowControl` feature gate on.
EPP_QUEUE_SERIES = "llm_d_epp_flow_control_queue_size"
# The pool's saturation gauge, set on every dispatch cycle (a 1 ms ticker) for as long as the
# EPP runs (pkg/epp/flowcontrol/controller/internal/processor.go dispatchCycle; label
# inference_pool only). The queue gauge's series are deleted when an idle flow is garbage
# collected (default after 5 minutes: pkg/epp/flowcontrol/registry/config.go
# defaultFlowGCTimeout, registry.go → metrics.DeleteFlowControlFlowSeries), so an idle pool has
# no queue series at all. The rule is therefore discovered through this always-present series,
# and reads 0 for a live EPP with nothing queued.
EPP_SATURATION_SERIES = "llm_d_epp_flow_control_pool_saturation"
# The custom metric's name: what an HPA's Object metric asks for.
EPP_QUEUE_METRIC = "epp_flow_control_queue_size"
# Both series carry `inference_pool` = the EPP's --pool-name, the InferencePool's metadata.name
# (pkg/epp/requestcontrol/admission.go inferencePoolName ← cmd/epp/runner/runner.go:992
# opts.PoolName); `namespace` is the EPP pod's, given by the PodMonitor that scrapes it (the
# chart runs the EPP in the pool's namespace: --pool-namespace <release namespace>).
EPP_POOL_LABEL = "inference_pool"
INFERENCE_POOL_GROUP = "inference.networking.k8s.io"
INFERENCE_POOL_API_VERSION = f"{INFERENCE_POOL_GROUP}/v1"
INFERENCE_POOL_KIND = "InferencePool"
INFERENCE_POOL_RESOURCES = {
    "overrides": {
        "namespace": {"resource": "namespace"},
        # The adapter resolves a group-resource through API discovery when it starts
        # (pkg/naming/resource_converter.go NewResourceConverter → CustomMetricInfo.Normalized →
        # RESTMapper.ResourceFor) and exits if the resource is unknown (cmd/adapter/adapter.go
        # klog.Fatalf "unable to construct custom metrics provider"): the InferencePool CRD must
        # be installed before an adapter carrying this rule starts. Discovery needs no RBAC on
        # the CRD, and neither does serving an HPA's Object metric (GetMetricByName queries
        # Prometheus only; only GetMetricBySelector lists objects).
        EPP_POOL_LABEL: {"group": INFERENCE_POOL_GROUP, "resource": "inferencepools"},
    }
}
# For one pool the adapter renders LabelMatchers as `namespace="<ns>",inference_pool="<pool>"`
# and GroupBy as `inference_pool` (pkg/naming/metrics_query.go Build), and matches the result
# back to the pool by its `inference_pool` label (pkg/custom-provider/series_registry.go
# MatchValuesToNames). Summed over priority bands, fairness flows, models and EPP replicas;
# clamped at 0 because a flow collected while a request revives it can leave the gauge briefly
# negative (metrics.go DeleteFlowControlFlowSeries). With no queue series but a live EPP (its
# saturation series present) the value is 0; with no EPP series at all there is no value, and
# the HPA then holds its replicas rather than scale down on a missing signal.
EPP_QUEUE_QUERY = (
    f"clamp_min(sum({EPP_QUEUE_SERIES}{{<<.LabelMatchers>>}}) by (<<.GroupBy>>), 0)"
    " or (0 * max(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>))"
)


def _rule(series: str, name: str, query: str) -> dict[str, Any]:
    return {
        "seriesQuery": f'{{__name__="{series}",namespace!="",pod!=""}}',
        "resources": POD_RESOURCES,
        # Colons are for recording rules; give the custom metrics API plain names.
        "name": {"matches": f"^{series}$", "as": name},
        "metricsQuery": query,
    }


def epp_queue_rule() -> dict[str, Any]:
    """The EPP's flow-control queue as a custom metric of the InferencePool it serves."""
    return {
        "seriesQuery": f'{{__name__="{EPP_SATURATION_SERIES}",namespace!="",{EPP_POOL_LABEL}!=""}}',
        "resources": INFERENCE_POOL_RESOURCES,
        "name": {"matches": f"^{EPP_SATURATION_SERIES}$", "as": EPP_QUEUE_METRIC},
        "metricsQuery": EPP_QUEUE_QUERY,
    }


def epp_queue_metric(pool_name: str, average_per_replica: int) -> dict[str, Any]:
    """An HPA (autoscaling/v2) metric on the requests the pool's EPP holds in its flow-control
    queue: demand the gateway has not yet passed to vLLM, so it never shows in vLLM's own
    waiting-requests metric.

    `Object` because the value belongs to the InferencePool, not to a server pod. Target
    `AverageValue` because the queued requests are divided among the Deployment's replicas, as
    the vLLM waiting-requests target is per pod: the HPA proposes ceil(queued /
    average_per_replica) replicas (a `Value` target would multiply the current replica count by
    queued / target instead, and so ask for no replicas at all when nothing is queued)."""
    if not pool_name:
        raise ValueError("pool_name: the InferencePool's name is required")
    if average_per_replica < 1:
        raise ValueError(f"average_per_replica: must be at least 1 queued request per replica, got {average_per_replica}")
    return {
        "type": "Object",
        "object": {
            "metric": {"name": EPP_QUEUE_METRIC},
            "describedObject": {"apiVersion": INFERENCE_POOL_API_VERSION, "kind": INFERENCE_POOL_KIND, "name": pool_name},
            "target": {"type": "AverageValue", "averageValue": str(average_per_replica)},
        },
    }


def adapter_rules(epp_queue: bool = False) -> dict[str, Any]:
    """The adapter's rules; `epp_queue` adds the EPP queue rule, which needs the InferencePool
    CRD installed before the adapter starts (see INFERENCE_POOL_RESOURCES)."""
    summed = "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)"
    return {
        "default": False,
        "custom": [
            _rule("vllm:num_requests_waiting", QUEUE_METRIC, summed),
            _rule("vllm:num_requests_running", "vllm_num_requests_running", summed),
            _rule(
                "vllm:kv_cache_usage_perc",
                "vllm_kv_cache_usage_percent",
                "avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>) * 100",
            ),
            _rule("DCGM_FI_PROF_GR_ENGINE_ACTIVE", GPU_METRIC, "avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>) * 100"),
            _rule(TTFT_P99_SERIES, TTFT_P99_METRIC, TTFT_P99_QUERY),
            *([epp_queue_rule()] if epp_queue else []),
        ],
    }


def adapter_values(prometheus_url: str, epp_queue: bool = False) -> dict[str, Any]:
    return {
        "prometheus": {"url": prometheus_url, "port": 9090},
        "rules": adapter_rules(epp_queue),
        "replicas": 2,
        "podDisruptionBudget": {"enabled": True, "maxUnavailable": 1},
    }
