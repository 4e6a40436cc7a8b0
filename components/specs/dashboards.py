"""Grafana dashboards as ConfigMaps (pure functions): a platform overview, and one per model with
its versions side by side, so a canary is visible next to the stable version at a glance.

Grafana is kube-prometheus-stack's (components/monitoring.py). Its dashboard sidecar loads the JSON
of every ConfigMap labelled `grafana_dashboard: "1"` (the chart's `grafana.sidecar.dashboards.label`
and `labelValue`, both in upstream-facts/charts/kube-prometheus-stack/81.4.3.json); the
monitoring component sets `searchNamespace: ALL` so a model's dashboard can live in its tenant's
namespace, next to its PrometheusRule, and go away with it.

No datasource uid is written into a dashboard: each has a `datasource` variable of type
prometheus, and every panel and query reads `${datasource}`, so the dashboards work with the
chart's own datasource (uid `prometheus` by default) or any other Prometheus the operator picks.

What the queries read:
- per model: only the series its PrometheusRule records (components/specs/slo_rules.py), every
  one labelled `model` and `tenant` and aggregated by `model_version`, so each panel draws one
  line per version;
- the overview: those recorded series of every model, the batch queues' (their PrometheusRule,
  components/specs/batch_rules.py), and exporter series listed in EXPORTER_SERIES with where
  each comes from.

Cost: the overview shows GPU-hours per hour (GPUs on nodes, by pool and by instance type) and,
for each priced pool, its nodes times its price per node-hour as the plan resolved it: the stack's
`pricePerHour`, else the dated AWS list price (platform_config/prices.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from ..constants import LABEL_POOL, standard_labels
from ..slo_plan import SloPlan
from .gpu_memory import gpu_memory_panels
from .metrics import EPP_QUEUE_SERIES, ksm_label, promql_string
from .slo_rules import error_ratio_series

# The sidecar's label (kube-prometheus-stack values `grafana.sidecar.dashboards.label` /
# `labelValue`, chart defaults at 81.4.3).
SIDECAR_LABEL = "grafana_dashboard"
SIDECAR_LABEL_VALUE = "1"
DATASOURCE_VARIABLE = "datasource"
DATASOURCE = {"type": "prometheus", "uid": f"${{{DATASOURCE_VARIABLE}}}"}

# The node labels kube-state-metrics must export (`--metric-labels-allowlist`, set in
# components/monitoring.py from these keys).
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ALLOWED_NODE_LABELS: tuple[str, ...] = (LABEL_POOL, INSTANCE_TYPE_LABEL)

POOL = ksm_label(LABEL_POOL)
INSTANCE_TYPE = ksm_label(INSTANCE_TYPE_LABEL)
# kube-state-metrics sanitises a resource name the same way: `nvidia.com/gpu` → `nvidia_com_gpu`.
GPU_RESOURCE = 'resource="nvidia_com_gpu"'

# Series the overview reads that no rule of ours records: name → where it comes from.
EXPORTER_SERIES: dict[str, str] = {
    # kube-state-metrics (kube-prometheus-stack's subchart), docs/metrics/workload/pod-metrics.md
    # and node-metrics.md: requests and capacity per resource, pod priority class, node labels.
    "kube_pod_container_resource_requests": "kube-state-metrics pod metrics (resource, unit, node)",
    "kube_pod_info": "kube-state-metrics pod metrics (priority_class, node)",
    "kube_node_status_capacity": "kube-state-metrics node metrics (resource, unit)",
    "kube_node_labels": "kube-state-metrics node metrics (label_* of --metric-labels-allowlist)",
    # NVIDIA dcgm-exporter of the GPU operator, its pod mapping giving `namespace` and `pod`
    # (components/specs/metrics.py: used for the GPU HPA metric too).
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "dcgm-exporter (GPU operator), engine activity 0..1",
    # The llm-d endpoint picker's flow-control queue (components/specs/metrics.py).
    EPP_QUEUE_SERIES: "llm-d endpoint picker, flow-control queue",
}


# --- building blocks ----------------------------------------------------------------------


def _target(expr: str, legend: str, ref: str) -> dict[str, Any]:
    return {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": ref}


def _panel(
    pid: int, title: str, targets: list[tuple[str, str]], unit: str, x: int, y: int, description: str = ""
) -> dict[str, Any]:
    """A time series panel, half the dashboard's width."""
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]}},
        "targets": [_target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(targets)],
    }


def _layout(specs: list[tuple[str, list[tuple[str, str]], str, str]]) -> list[dict[str, Any]]:
    """Panels two to a row, in order."""
    return [
        _panel(i + 1, title, targets, unit, x=12 * (i % 2), y=8 * (i // 2), description=description)
        for i, (title, targets, unit, description) in enumerate(specs)
    ]


def _dashboard(uid: str, title: str, tags: list[str], panels: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "tags": ["inference-platform", *tags],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": False,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": DATASOURCE_VARIABLE,
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                    "refresh": 1,
                }
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }


# --- the dashboards -----------------------------------------------------------------------


def model_dashboard(slo: SloPlan) -> dict[str, Any]:
    """A model's dashboard: every panel one line per version (`{{model_version}}`)."""
    sel = f"{{model={promql_string(slo.model)}, tenant={promql_string(slo.tenant)}}}"

    def per_version(agg: str, series: str) -> list[tuple[str, str]]:
        return [(f"{agg} by (model_version) ({series}{sel})", "{{model_version}}")]

    def per_version_share(ratio: str) -> list[tuple[str, str]]:
        # A ratio recorded per version and tier, weighed by each tier's requests.
        requests = f"model_version_tier:istio_requests:rate5m{sel}"
        expr = f"sum by (model_version) ({ratio}{sel} * {requests}) / sum by (model_version) ({requests})"
        return [(expr, "{{model_version}}")]

    specs: list[tuple[str, list[tuple[str, str]], str, str]] = [
        (
            "Requests per second",
            per_version("sum", "model_version_tier:istio_requests:rate5m"),
            "reqps",
            "All tiers, as the server's sidecar saw them.",
        ),
        ("Time to first token p95", per_version("max", "model_version:vllm_time_to_first_token_seconds:p95"), "s", ""),
        ("Inter-token latency p95", per_version("max", "model_version:vllm_inter_token_latency_seconds:p95"), "s", ""),
        ("Request latency p95 (vLLM)", per_version("max", "model_version:vllm_e2e_request_latency_seconds:p95"), "s", ""),
        (
            "Shed (503) share of answers",
            per_version_share("model_version_tier:istio_requests_503:ratio_rate5m"),
            "percentunit",
            "503s, the platform's load shedding included.",
        ),
        (
            "Other 5xx share of answers",
            per_version_share("model_version_tier:istio_requests_5xx_not_503:ratio_rate5m"),
            "percentunit",
            "",
        ),
        ("Requests waiting (vLLM queue)", per_version("sum", "model_version:vllm_num_requests_waiting:sum"), "short", ""),
        ("Requests running", per_version("sum", "model_version:vllm_num_requests_running:sum"), "short", ""),
        ("KV cache usage (fullest server)", per_version("max", "model_version:vllm_kv_cache_usage_perc:max"), "percentunit", ""),
        ("Generated tokens per second", per_version("sum", "model_version:vllm_generation_tokens:rate5m"), "short", ""),
        (
            "GPU engine activity",
            per_version("max", "model_version:dcgm_gpu_engine_active:avg"),
            "percentunit",
            "DCGM engine activity of the GPUs (or MIG slices) the version's pods hold, averaged over its pods.",
        ),
        (
            "Availability error ratio (1 h)",
            per_version("max", error_ratio_series("availability", "1h")),
            "percentunit",
            f"Objective {slo.availability_objective:.4g}: error budget {1 - slo.availability_objective:.4g}.",
        ),
    ]
    if slo.latency is not None:
        specs.append(
            (
                "Latency error ratio (1 h)",
                per_version("max", error_ratio_series("latency", "1h")),
                "percentunit",
                f"Objective {slo.latency.objective:.4g} within {slo.latency.threshold_ms:g} ms.",
            )
        )
    return _dashboard(f"model-{slo.tenant}-{slo.model}"[:40], f"Model {slo.model} ({slo.tenant})", ["model"], _layout(specs))


def pool_cost_per_hour(prices: Mapping[str, Decimal]) -> str:
    """Each priced pool's nodes times its price per node-hour, one series per pool."""
    return " or ".join(
        f"sum by ({POOL}) (kube_node_labels{{{POOL}={promql_string(pool)}}}) * {format(price.normalize(), 'f')}"
        for pool, price in sorted(prices.items())
    )


def batch_queue_panels() -> list[tuple[str, list[tuple[str, str]], str, str]]:
    """Per tenant ClusterQueue: workloads pending and admitted, units of each GPU resource in use
    against the nominal quota and borrowed beyond it, evictions; per job, the share of its shards done (the batch
    queues' recorded series, components/specs/batch_rules.py)."""
    return [
        (
            "Batch: workloads pending by tenant",
            [("sum by (tenant, status) (tenant:kueue_pending_workloads:sum)", "{{tenant}} ({{status}})")],
            "short",
            "Kueue workloads waiting in each tenant's ClusterQueue: active (queued for quota) or inadmissible "
            "(retried only when the cluster changes).",
        ),
        (
            "Batch: workloads admitted by tenant",
            [("sum by (tenant) (tenant:kueue_admitted_active_workloads:sum)", "{{tenant}}")],
            "short",
            "",
        ),
        (
            "Batch: GPU units in use, nominal quota and borrowed by tenant and resource",
            [
                ("sum by (tenant, resource) (tenant_flavor_resource:kueue_gpu_usage:sum)", "{{tenant}} {{resource}} in use"),
                (
                    "sum by (tenant, resource) (tenant_flavor_resource:kueue_gpu_nominal_quota:sum)",
                    "{{tenant}} {{resource}} nominal",
                ),
                ("sum by (tenant, resource) (tenant_flavor_resource:kueue_gpu_borrowed:sum)", "{{tenant}} {{resource}} borrowed"),
            ],
            "short",
            "Units of each GPU resource (whole GPUs, or slices of one MIG profile: never added together) the tenant's "
            "admitted batch work holds, over all its batch pools; what is beyond its nominal quota of a pool and resource "
            "is borrowed from the cohort and reclaimed by preemption.",
        ),
        (
            "Batch: evictions in the last hour by tenant and reason",
            [("sum by (tenant, reason) (tenant:kueue_evicted_workloads:increase1h)", "{{tenant}} {{reason}}")],
            "short",
            "Preempted: reclaimed or outranked; LocalQueueStopped: a job paused.",
        ),
        (
            "Batch: shards done by job",
            [("max by (namespace, job_name) (job:kube_job_shards_done:ratio)", "{{namespace}}/{{job_name}}")],
            "percentunit",
            "Completed shards over shards of each platform batch job (kube-state-metrics).",
        ),
    ]


def platform_overview_dashboard(prices: Mapping[str, Decimal], batch: bool = False) -> dict[str, Any]:
    """GPU use by pool, tenant and priority; queue depth; shed requests; GPU-hours per hour, and
    the cost per hour of the priced pools (`pricePerHour`, else the list price); with `batch` (Kueue
    installed), the batch queues per tenant."""
    specs = gpu_use_panels() + queue_and_shed_panels() + gpu_hours_panels()
    if prices:
        specs.append(
            (
                "Cost per hour by pool",
                [(pool_cost_per_hour(prices), f"{{{{{POOL}}}}}")],
                "short",
                "Nodes of each pool times its price per node-hour in USD: the stack's `pricePerHour`, else the AWS "
                "list price (the preview's Cost section names its date).",
            )
        )
    specs += gpu_memory_panels()
    if batch:
        specs += batch_queue_panels()
    return _dashboard("inference-platform-overview", "Inference platform overview", ["overview"], _layout(specs))


# Whole GPUs requested by scheduled pods (kube-state-metrics), and each node's pool and instance type.
_GPU_REQUESTS = f"kube_pod_container_resource_requests{{{GPU_RESOURCE}}}"
_NODE_POOLS = f"max by (node, {POOL}) (kube_node_labels)"
_NODE_TYPES = f"max by (node, {INSTANCE_TYPE}) (kube_node_labels)"


def gpu_use_panels() -> list[tuple[str, list[tuple[str, str]], str, str]]:
    """GPUs requested by pool, tenant and priority class, and how busy the tenants' GPUs are."""
    return [
        (
            "GPUs requested by pool",
            [(f"sum by ({POOL}) ({_GPU_REQUESTS} * on (node) group_left ({POOL}) {_NODE_POOLS})", f"{{{{{POOL}}}}}")],
            "short",
            "Whole GPUs requested by scheduled pods (kube-state-metrics), by the node's pool.",
        ),
        ("GPUs requested by tenant", [(f"sum by (namespace) ({_GPU_REQUESTS})", "{{namespace}}")], "short", ""),
        (
            "GPUs requested by priority class",
            [
                (
                    f"sum by (priority_class) ({_GPU_REQUESTS} * on (namespace, pod) group_left (priority_class)"
                    " max by (namespace, pod, priority_class) (kube_pod_info))",
                    "{{priority_class}}",
                )
            ],
            "short",
            "",
        ),
        (
            "GPU engine activity by tenant",
            [("avg by (namespace) (DCGM_FI_PROF_GR_ENGINE_ACTIVE)", "{{namespace}}")],
            "percentunit",
            "DCGM graphics-engine activity of the GPUs (and MIG slices) each tenant's pods hold.",
        ),
    ]


def queue_and_shed_panels() -> list[tuple[str, list[tuple[str, str]], str, str]]:
    """Requests waiting by model (in vLLM and in the endpoint pickers), and those shed by tier and by model."""
    # Shed requests per second: the 503 share of each version's and tier's answers times its requests.
    shed = (
        "model_version_tier:istio_requests_503:ratio_rate5m"
        " * on (model, tenant, model_version, tier) model_version_tier:istio_requests:rate5m"
    )
    return [
        (
            "Queue depth by model",
            [
                ("sum by (tenant, model) (model_version:vllm_num_requests_waiting:sum)", "{{tenant}}/{{model}} (vLLM)"),
                (
                    f"sum by (namespace, inference_pool) ({EPP_QUEUE_SERIES})",
                    "{{namespace}}/{{inference_pool}} (endpoint picker)",
                ),
            ],
            "short",
            "Requests waiting in vLLM's queues, and in the endpoint pickers' flow control.",
        ),
        (
            "Shed requests (503) per second by tier",
            [(f"sum by (tier) ({shed})", "{{tier}}")],
            "reqps",
            "",
        ),
        (
            "Shed requests (503) per second by model",
            [(f"sum by (tenant, model) ({shed})", "{{tenant}}/{{model}}")],
            "reqps",
            "",
        ),
    ]


def gpu_hours_panels() -> list[tuple[str, list[tuple[str, str]], str, str]]:
    """The GPUs on nodes, by pool and by instance type: what is paid for each hour."""
    gpu_capacity = f"kube_node_status_capacity{{{GPU_RESOURCE}}}"
    return [
        (
            "GPU-hours per hour by pool and instance type",
            [
                (f"sum by ({POOL}) ({gpu_capacity} * on (node) group_left ({POOL}) {_NODE_POOLS})", f"{{{{{POOL}}}}}"),
                (
                    f"sum by ({INSTANCE_TYPE}) ({gpu_capacity} * on (node) group_left ({INSTANCE_TYPE}) {_NODE_TYPES})",
                    f"{{{{{INSTANCE_TYPE}}}}}",
                ),
            ],
            "short",
            "GPUs on nodes: what is paid for each hour.",
        ),
    ]


def dashboard_config_map(name: str, namespace: str, dashboard: dict[str, Any]) -> dict[str, Any]:
    """The ConfigMap the sidecar loads: one JSON file named after the dashboard."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**standard_labels(name, "dashboard"), SIDECAR_LABEL: SIDECAR_LABEL_VALUE},
        },
        "data": {f"{name}.json": json.dumps(dashboard, sort_keys=True, separators=(",", ":"))},
    }
