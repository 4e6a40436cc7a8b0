"""prometheus-adapter rules: vLLM's queue and DCGM's GPU activity as custom (Pods) metrics.

HPA `Resource` metrics are cpu and memory only; GPU metrics reach an HPA through Prometheus and
this adapter. DCGM_FI_PROF_GR_ENGINE_ACTIVE (0..1) is used for GPU activity because
DCGM_FI_DEV_GPU_UTIL is not reported for MIG slices; with honorLabels the exporter's `pod` and
`namespace` labels name the pod that holds the GPU.
"""

from __future__ import annotations

from typing import Any

# The custom metrics' names: what the HPAs of the `hpa` backend ask for.
QUEUE_METRIC = "vllm_num_requests_waiting"
GPU_METRIC = "gpu_engine_active_percent"

POD_RESOURCES = {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}}


def _rule(series: str, name: str, query: str) -> dict[str, Any]:
    return {
        "seriesQuery": f'{{__name__="{series}",namespace!="",pod!=""}}',
        "resources": POD_RESOURCES,
        # Colons are for recording rules; give the custom metrics API plain names.
        "name": {"matches": f"^{series}$", "as": name},
        "metricsQuery": query,
    }


def adapter_rules() -> dict[str, Any]:
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
        ],
    }


def adapter_values(prometheus_url: str) -> dict[str, Any]:
    return {
        "prometheus": {"url": prometheus_url, "port": 9090},
        "rules": adapter_rules(),
        "replicas": 2,
        "podDisruptionBudget": {"enabled": True, "maxUnavailable": 1},
    }
