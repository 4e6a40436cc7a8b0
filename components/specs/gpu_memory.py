"""GPU memory on the nodes, as DCGM reports it: used and headroom per GPU and per MIG instance, an alert when a
device is running out, and the MIG instances each node reports against the geometry its pool declares (pure).

What dcgm-exporter reports, at the version the pinned GPU Operator runs (gpu-operator v25.10.1
`deployments/gpu-operator/values.yaml`: dcgmExporter.version 4.4.2-4.7.0-distroless; NVIDIA/dcgm-exporter 4.4.2-4.7.0
`etc/default-counters.csv`): DCGM_FI_DEV_FB_FREE, DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_FB_RESERVED, in MiB, one series
per GPU, or per MIG instance with its `GPU_I_PROFILE` (e.g. `3g.40gb`) and `GPU_I_ID`
(`internal/pkg/rendermetrics/render_metrics.go`), labelled `Hostname` and, with the exporter's pod mapping and the
ServiceMonitor's honorLabels (specs/gpu_operator.py), the `namespace` and `pod` that hold the device.

vLLM takes `gpu_memory_utilization` of a device up front (0.90 by default: platform_config/serving.py) and keeps it, so
a device's headroom sits near a tenth while it serves; below HEADROOM_ALERT_RATIO something beyond that share is
filling it (a time-sliced neighbour over its share, a process outside vLLM's budget), and the next allocation fails.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from platform_config.gpu_catalog import MIG_RESOURCE_PREFIX

from ..constants import GPU_OPERATOR_NAMESPACE, standard_labels
from ..pool_plan import PoolPlan

RULE_NAME = "gpu-memory"
MIB = 1024 * 1024
FB_USED, FB_FREE, FB_RESERVED = "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED"
# A device's labels the records keep: the node, the GPU, the MIG instance (absent on a whole GPU), who holds it.
DEVICE = "Hostname, gpu, GPU_I_PROFILE, GPU_I_ID, namespace, pod"
USED_BYTES = "device:gpu_framebuffer_used:bytes"
HEADROOM_RATIO = "device:gpu_framebuffer_headroom:ratio"
DECLARED_MIG = "pool:mig_instances_declared_per_node:count"
REPORTED_MIG = "node:mig_instances_reported:count"
# Below this share free, for HEADROOM_ALERT_FOR, a device is running out (see the module's docstring).
HEADROOM_ALERT_RATIO = 0.05
HEADROOM_ALERT_FOR = "15m"
RUNBOOK = "docs/design/slo.md#gpu-memory-headroom-low"


def declared_mig_instances(pools: Iterable[PoolPlan]) -> dict[str, dict[str, int]]:
    """Each MIG pool's instances per node, by profile: what its geometry gives a node, as the plan's pool slices hold
    it (platform_config/pool_plan.py)."""
    declared: dict[str, dict[str, int]] = {}
    for pool_plan in pools:
        pool = pool_plan.pool
        if pool.sharing.mode != "mig":
            continue
        per_node = pool_plan.capacity.supply.per_node
        declared[pool.name] = {
            resource.removeprefix(MIG_RESOURCE_PREFIX): count
            for resource, count in sorted(per_node.items())
            if resource.startswith(MIG_RESOURCE_PREFIX)
        }
    return declared


def _record(name: str, expr: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"record": name, "expr": expr}
    if labels:
        rule["labels"] = dict(labels)
    return rule


def memory_rules() -> list[dict[str, Any]]:
    """Used bytes and the free share of each device (GPU or MIG instance)."""
    total = f"({FB_USED} + {FB_FREE} + {FB_RESERVED})"
    return [
        _record(USED_BYTES, f"max by ({DEVICE}) ({FB_USED}) * {MIB}"),
        _record(HEADROOM_RATIO, f"max by ({DEVICE}) ({FB_FREE} / {total})"),
    ]


def mig_rules(declared: Mapping[str, Mapping[str, int]]) -> list[dict[str, Any]]:
    """The MIG instances each node reports, by profile, and what each pool declares per node (its geometry's
    instances, constants of the program's plan), so a panel sets the one beside the other."""
    rules = [_record(REPORTED_MIG, f'count by (Hostname, GPU_I_PROFILE) ({FB_USED}{{GPU_I_PROFILE!=""}})')]
    for pool, profiles in sorted(declared.items()):
        for profile, count in sorted(profiles.items()):
            rules.append(_record(DECLARED_MIG, f"vector({count})", {"pool": pool, "GPU_I_PROFILE": profile}))
    return rules


def memory_alerts() -> list[dict[str, Any]]:
    return [
        {
            "alert": "GpuMemoryHeadroomLow",
            "expr": f"{HEADROOM_RATIO} < {HEADROOM_ALERT_RATIO}",
            "for": HEADROOM_ALERT_FOR,
            "labels": {"severity": "ticket"},
            "annotations": {
                "summary": "GPU memory of {{ $labels.Hostname }} GPU {{ $labels.gpu }} {{ $labels.GPU_I_PROFILE }} runs out",
                "description": (
                    f"Less than {HEADROOM_ALERT_RATIO:.0%} of the device's memory has been free for {HEADROOM_ALERT_FOR} "
                    "({{ $value | humanizePercentage }}), held by {{ $labels.namespace }}/{{ $labels.pod }}: beyond the share "
                    "vLLM takes, the next allocation fails."
                ),
                "runbook_url": RUNBOOK,
            },
        }
    ]


def gpu_memory_prometheus_rule(declared: Mapping[str, Mapping[str, int]]) -> dict[str, Any]:
    """The PrometheusRule beside the DCGM exporter's ServiceMonitor; `declared` is each MIG pool's instances per node
    by profile."""
    groups: list[dict[str, Any]] = [
        {"name": "gpu.memory", "interval": "30s", "rules": memory_rules() + mig_rules(declared)},
        {"name": "gpu.memory.alerts", "rules": memory_alerts()},
    ]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": RULE_NAME, "namespace": GPU_OPERATOR_NAMESPACE, "labels": standard_labels(RULE_NAME, "slo")},
        "spec": {"groups": groups},
    }


def gpu_memory_panels() -> list[tuple[str, list[tuple[str, str]], str, str]]:
    """The overview's panels (title, queries, unit, description), from the records above."""
    device = "{{Hostname}} gpu {{gpu}} {{GPU_I_PROFILE}} {{namespace}}/{{pod}}"
    return [
        (
            "GPU memory used per GPU and MIG instance",
            [(USED_BYTES, device)],
            "bytes",
            "DCGM's framebuffer used on each device; vLLM takes its gpuMemoryUtilization share up front.",
        ),
        (
            "GPU memory headroom per GPU and MIG instance",
            [(HEADROOM_RATIO, device)],
            "percentunit",
            f"The free share of each device; below {HEADROOM_ALERT_RATIO:.0%} for {HEADROOM_ALERT_FOR}, GpuMemoryHeadroomLow.",
        ),
        (
            "MIG instances: reported per node against declared per node",
            [
                (REPORTED_MIG, "{{Hostname}} {{GPU_I_PROFILE}} (reported)"),
                (DECLARED_MIG, "{{pool}} {{GPU_I_PROFILE}} (declared)"),
            ],
            "short",
            "What each node's GPUs report by profile, beside what its pool's geometry declares per node: a node below "
            "its pool's line has not applied the geometry (mig-manager, nvidia.com/mig.config.state).",
        ),
    ]
