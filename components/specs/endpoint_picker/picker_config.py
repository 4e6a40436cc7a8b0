"""The endpoint picker's own configuration, the EndpointPickerConfig in its ConfigMap: the chart's
default plugins and weights, flow control with one priority band per tier, and the upstream tables
the tests hold it to. LR, SA and IS name the upstream sources the package's docstring cites."""

from __future__ import annotations

from typing import Any

from platform_config.quantity import binary_quantity, parse_quantity

from ...picker_plan import EndpointPickerPlan, PickerBand
from .names import MESH_METRICS_PATH, MESH_STATUS_PORT
from .plan_rules import check_plan, queue_ttl_seconds, sorted_bands, total_queue_bytes

# How often the EPP reads each server's metrics, and how old they may be before the saturation
# detector counts the server as full (fail closed: LR utilization/detector.go Saturation). The
# EPP's base tick is 50 ms (LR pkg/epp/server/options.go RefreshMetricsInterval), but each read
# now goes through the server's sidecar, whose agent fetches Envoy's stats and vLLM's /metrics
# for it (status/server.go handleStats) and answers with both: at 50 ms that is 20 merged scrapes
# a second per EPP replica and server, on vLLM's API process too. Every 250 ms is 4 a second.
# Staleness keeps upstream's ratio of 4 reads (50 ms tick, 200 ms DefaultMetricsStalenessThreshold,
# utilization/config.go), so one slow read does not stop dispatch to a pod.
SERVER_METRICS_INTERVAL = "250ms"
SERVER_METRICS_STALENESS = "1s"

# --- upstream tables ------------------------------------------------------------------------
CONFIG_TYPES = "apix/config/v1alpha1/endpointpickerconfig_types.go"
# The EndpointPickerConfig fields we may use, per place in the document: (Go type, file at
# v0.10.0, json names). The tests check the config uses nothing else and, with the mirror, that
# each Go type has exactly these json tags.
EPP_CONFIG_FIELDS: dict[str, tuple[str, str, frozenset[str]]] = {
    "": (
        "EndpointPickerConfig",
        CONFIG_TYPES,
        frozenset(
            {
                "apiVersion",
                "kind",
                "featureGates",
                "plugins",
                "schedulingProfiles",
                "dataLayer",
                "flowControl",
                "requestHandler",
                "saturationDetector",
                "parser",
            }
        ),
    ),
    "plugins[]": ("PluginSpec", CONFIG_TYPES, frozenset({"name", "type", "parameters"})),
    "schedulingProfiles[]": ("SchedulingProfile", CONFIG_TYPES, frozenset({"name", "plugins"})),
    "schedulingProfiles[].plugins[]": ("SchedulingPlugin", CONFIG_TYPES, frozenset({"pluginRef", "weight"})),
    "flowControl": (
        "FlowControlConfig",
        CONFIG_TYPES,
        frozenset(
            {
                "maxBytes",
                "maxRequests",
                "defaultRequestTTL",
                "defaultPriorityBand",
                "defaultNegativePriorityBand",
                "priorityBands",
                "usageLimitPolicyPluginRef",
                "saturationDetector",
                "enableEviction",
            }
        ),
    ),
    "flowControl.saturationDetector": ("SaturationDetectorConfig", CONFIG_TYPES, frozenset({"pluginRef"})),
}
_BAND_FIELDS = (
    "PriorityBandConfig",
    CONFIG_TYPES,
    frozenset({"priority", "maxBytes", "maxRequests", "fairnessPolicyRef", "orderingPolicyRef"}),
)
for _where in ("flowControl.priorityBands[]", "flowControl.defaultPriorityBand", "flowControl.defaultNegativePriorityBand"):
    EPP_CONFIG_FIELDS[_where] = _BAND_FIELDS

# Plugin types we configure: the files at v0.10.0 that name the type and define its parameters,
# and the parameters' json names.
EPP_PLUGINS: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {
    "queue-scorer": (("pkg/epp/framework/plugins/scheduling/scorer/queuedepth/queue.go",), frozenset()),
    "kv-cache-utilization-scorer": (
        ("pkg/epp/framework/plugins/scheduling/scorer/kvcacheutilization/kvcache_utilization.go",),
        frozenset(),
    ),
    "prefix-cache-scorer": (("pkg/epp/framework/plugins/scheduling/scorer/prefix/plugin.go",), frozenset()),
    "lora-affinity-scorer": (("pkg/epp/framework/plugins/scheduling/scorer/loraaffinity/lora_affinity.go",), frozenset()),
    "metrics-data-source": (
        ("pkg/epp/framework/plugins/datalayer/source/metrics/datasource.go",),
        frozenset({"scheme", "path", "port", "interval"}),
    ),
    "core-metrics-extractor": (("pkg/epp/framework/plugins/datalayer/extractor/metrics/factories.go",), frozenset()),
    "utilization-detector": (
        (
            "pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization/detector.go",
            "pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization/config.go",
        ),
        frozenset({"queueDepthThreshold", "kvCacheUtilThreshold", "metricsStalenessThreshold", "headroom"}),
    ),
}
# The feature gate that turns flow control on (LR pkg/epp/flowcontrol/config.go FeatureGate;
# registered off by default in cmd/epp/runner/runner.go).
FLOW_CONTROL_GATE = "flowControl"
SATURATION_DETECTOR = "utilization-detector"
# What the `core-metrics-extractor`, configured without parameters, reads from each vLLM server:
# the series of llm-d-router v0.10.0's default engine, "vllm"
# (pkg/epp/framework/plugins/datalayer/extractor/metrics/factories.go defaultEngineConfigs), each
# with the labels it reads (the info gauges': extractor.go LoraInfo*MetricName,
# CacheConfig*MetricName). tests/test_vllm_metrics.py holds them to vLLM 0.33.0's source release.
PICKER_VLLM_SERIES: dict[str, frozenset[str]] = {
    "vllm:num_requests_waiting": frozenset(),
    "vllm:num_requests_running": frozenset(),
    "vllm:kv_cache_usage_perc": frozenset(),
    "vllm:lora_requests_info": frozenset({"running_lora_adapters", "waiting_lora_adapters", "max_lora"}),
    "vllm:cache_config_info": frozenset({"block_size", "num_gpu_blocks"}),
}
# The chart's default scheduling profile: queue 2, KV cache 2, prefix cache 3 (routerlib _config.yaml).
SCORER_WEIGHTS = (("queue-scorer", 2), ("kv-cache-utilization-scorer", 2), ("prefix-cache-scorer", 3))
# For servers with LoRA adapters: prefer a replica where the request's adapter is already active,
# then one with a free slot (pkg/epp/framework/plugins/scheduling/scorer/loraaffinity/README.md at
# v0.10.0: 1.0 active, 0.8 room to load, 0.6 waiting, 0 full), from vLLM's `vllm:lora_requests_info`
# that the core metrics extractor reads for vLLM by default (extractor/metrics/factories.go
# defaultEngineConfigs). vLLM 0.33.0 defines that gauge only for a server with LoRA enabled
# (vllm/v1/metrics/loggers.py PrometheusStatLogger, line 1104 of its source release; labels
# max_lora, waiting_lora_adapters, running_lora_adapters: tests/test_vllm_metrics.py). The chart
# configures no weight for it; 1, as the scorer's README and the router's integration test configs
# (test/integration/epp/testdata/default-config.yaml) use it.
LORA_AFFINITY_SCORER = ("lora-affinity-scorer", 1)


# --- the EPP's own configuration ------------------------------------------------------------


def _band(priority: int, band: PickerBand) -> dict[str, Any]:
    # Quantities as strings: resource.Quantity (PriorityBandConfig.maxBytes/maxRequests).
    return {"priority": priority, "maxBytes": band.max_bytes, "maxRequests": str(band.max_requests)}


def endpoint_picker_config(plan: EndpointPickerPlan) -> dict[str, Any]:
    """The EndpointPickerConfig (LR apix/config/v1alpha1, group llm-d.ai): the chart's default
    plugins and weights (routerlib _config.yaml default-plugins.yaml), plus flow control."""
    check_plan(plan)
    bands = sorted_bands(plan)
    smallest = min(plan.bands, key=lambda band: (parse_quantity(band.max_bytes), band.max_requests))
    flow_control: dict[str, Any] = {
        # Global caps: the sums of the bands, so all queues together stay under the memory budget.
        "maxBytes": binary_quantity(total_queue_bytes(plan)),
        "maxRequests": str(sum(band.max_requests for band in plan.bands)),
        "defaultRequestTTL": f"{queue_ttl_seconds(plan)}s",
        "saturationDetector": {"pluginRef": SATURATION_DETECTOR},
        "priorityBands": [_band(band.priority, band) for band in bands],
        # A request with no objective, or one we did not declare, has priority 0 (LR
        # pkg/epp/requestcontrol/director.go): it gets the smallest band's caps, not the system
        # default of 1G and 5000 requests (LR pkg/epp/flowcontrol/registry/config.go).
        "defaultPriorityBand": _band(0, smallest),
    }
    negative = [band for band in plan.bands if band.priority < 0]
    if negative:
        # Any other negative priority is sheddable too: it gets the lowest band's caps.
        lowest = min(negative, key=lambda band: band.priority)
        flow_control["defaultNegativePriorityBand"] = _band(lowest.priority, lowest)
        if len(negative) < len(plan.bands):
            # Shedding is more than a lower band: when higher-priority requests are held by
            # saturation, the EPP ends sheddable (priority < 0) requests already on a server to
            # make room (apix/config/v1alpha1 endpointpickerconfig_types.go EnableEviction;
            # pkg/epp/flowcontrol/eviction), answered with x-llm-d-request-dropped-reason
            # `evicted-*` (pkg/common/error/error.go), which the gateway answers 503 with
            # Retry-After. Off by default upstream; meaningless when every band is sheddable.
            flow_control["enableEviction"] = True
    return {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "featureGates": [FLOW_CONTROL_GATE],
        "plugins": [
            {"type": "queue-scorer"},
            {"type": "kv-cache-utilization-scorer"},
            {"type": "prefix-cache-scorer"},
            *([{"type": LORA_AFFINITY_SCORER[0]}] if plan.lora_affinity else []),
            # vLLM's metrics through each server's sidecar (MESH_STATUS_PORT), plain HTTP there: the
            # chart's podIP:8000/metrics is the vLLM port, which takes mTLS only. `port` overrides
            # the pool's target port for every endpoint (datasource.go; one target port per pool).
            {
                "type": "metrics-data-source",
                "parameters": {
                    "scheme": "http",
                    "path": MESH_METRICS_PATH,
                    "port": MESH_STATUS_PORT,
                    "interval": SERVER_METRICS_INTERVAL,
                },
            },
            {"type": "core-metrics-extractor"},
            # Saturation: the detector's default thresholds (config.go), stated; staleness to match
            # the scrape interval (see SERVER_METRICS_STALENESS).
            {
                "type": SATURATION_DETECTOR,
                "parameters": {
                    "queueDepthThreshold": 5,
                    "kvCacheUtilThreshold": 0.8,
                    "metricsStalenessThreshold": SERVER_METRICS_STALENESS,
                },
            },
        ],
        "schedulingProfiles": [
            {
                "name": "default",
                "plugins": [
                    {"pluginRef": ref, "weight": weight}
                    for ref, weight in (*SCORER_WEIGHTS, *((LORA_AFFINITY_SCORER,) if plan.lora_affinity else ()))
                ],
            }
        ],
        "flowControl": flow_control,
    }
