"""How GPU pools are shared, as the NVIDIA GPU Operator reads it (pure functions).

- Node labels: `nvidia.com/mig.config` picks a mig-parted config for MIG pools;
  `nvidia.com/device-plugin.config` picks a device-plugin config (time-slicing or plain).
- The mig-parted ConfigMap holds every geometry the pools use (a custom ConfigMap replaces the
  operator's built-in one, so built-in names in use are written out too).
- The device-plugin ConfigMap holds one config per time-slicing factor plus the plain one.
"""

from __future__ import annotations

from typing import Any

import yaml

from platform_config.capacity import instance_of, pool_geometry
from platform_config.gpu_catalog import GPU_RESOURCE, MigGeometryDef
from platform_config.models import NodePoolConfig
from platform_config.pool_plan import PoolCapacity

from ..constants import (
    GPU_TAINT_EFFECT,
    GPU_TAINT_KEY,
    GPU_TAINT_VALUE,
    LABEL_GPU_SHARING,
    LABEL_POOL,
    NODE_LABEL_ACCELERATOR,
    NODE_LABEL_DEPLOY_DEVICE_PLUGIN,
    NODE_LABEL_DEVICE_PLUGIN_CONFIG,
    NODE_LABEL_MIG_CONFIG,
)

PLAIN_DEVICE_PLUGIN_CONFIG = "whole-gpus"
MIG_DISABLED_CONFIG = "all-disabled"
MIG_STRATEGY = "mixed"


def device_plugin_config_name(pool: NodePoolConfig) -> str:
    if pool.sharing.mode == "timeSlicing":
        return f"time-sliced-{pool.sharing.replicas}"
    return PLAIN_DEVICE_PLUGIN_CONFIG


def node_labels(capacity: PoolCapacity) -> dict[str, str]:
    """Labels every node of the pool carries (set on the node group, so present at boot), from the pool's capacity
    as the plan resolved it (what one node advertises)."""
    pool = capacity.pool
    labels = {**pool.labels, LABEL_POOL: pool.name, LABEL_GPU_SHARING: pool.sharing.mode}
    if GPU_RESOURCE in capacity.supply.per_node:
        # The cluster autoscaler's AWS provider treats a node with this label as a GPU node: it
        # waits for `nvidia.com/gpu` to be advertised instead of scaling up again while the device
        # plugin starts (kubernetes/autoscaler cluster-autoscaler/cloudprovider/aws/README.md, "GPU
        # instances"; GPULabel in aws_cloud_provider.go). Only where the node advertises whole GPUs
        # (or shares): a node of MIG slices alone never does, and the autoscaler would count it
        # unready forever (gpu_processor.go FilterOutNodesWithUnreadyResources).
        labels[NODE_LABEL_ACCELERATOR] = accelerator_name(pool)
    if pool.ami_type.startswith("BOTTLEROCKET"):
        # Bottlerocket's NVIDIA variant runs its own device plugin; the operator's must not.
        labels[NODE_LABEL_DEPLOY_DEVICE_PLUGIN] = "false"
        return labels
    labels[NODE_LABEL_DEVICE_PLUGIN_CONFIG] = device_plugin_config_name(pool)
    geometry = pool_geometry(pool)
    labels[NODE_LABEL_MIG_CONFIG] = geometry.name if geometry is not None else MIG_DISABLED_CONFIG
    return labels


def accelerator_name(pool: NodePoolConfig) -> str:
    """`nvidia-h100`, `nvidia-l4`, ...: the pool's GPU model, as the label's value."""
    return "nvidia-" + instance_of(pool).gpu.name.split("-")[0].lower()


def node_taint() -> dict[str, str]:
    return {"key": GPU_TAINT_KEY, "value": GPU_TAINT_VALUE, "effect": GPU_TAINT_EFFECT}


def _mig_parted_entry(geometry: MigGeometryDef) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    next_device = 0
    for layout in geometry.layouts:
        if layout.gpus is None:
            devices: str | list[int] = "all"
        else:
            devices = list(range(next_device, next_device + layout.gpus))
            next_device += layout.gpus
        entry: dict[str, Any] = {"devices": devices, "mig-enabled": layout.mig_enabled}
        if layout.mig_enabled:
            entry["mig-devices"] = {profile: count for profile, count in layout.profiles}
        entries.append(entry)
    return entries


def mig_parted_config(pools: list[NodePoolConfig]) -> dict[str, Any]:
    """mig-parted's config.yaml: `all-disabled` plus every geometry a MIG pool uses."""
    configs: dict[str, Any] = {MIG_DISABLED_CONFIG: [{"devices": "all", "mig-enabled": False}]}
    for pool in pools:
        geometry = pool_geometry(pool)
        if geometry is not None:
            configs[geometry.name] = _mig_parted_entry(geometry)
    return {"version": "v1", "mig-configs": configs}


def device_plugin_configs(pools: list[NodePoolConfig]) -> dict[str, str]:
    """ConfigMap data: one device-plugin config (YAML text) per name the pools' labels use."""
    configs = {PLAIN_DEVICE_PLUGIN_CONFIG: _device_plugin_config(None)}
    for pool in pools:
        if pool.sharing.mode == "timeSlicing":
            configs[device_plugin_config_name(pool)] = _device_plugin_config(pool.sharing.replicas)
    return {name: yaml.safe_dump(config, sort_keys=False) for name, config in sorted(configs.items())}


def _device_plugin_config(replicas: int | None) -> dict[str, Any]:
    config: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": MIG_STRATEGY}}
    if replicas is not None:
        config["sharing"] = {
            "timeSlicing": {
                # Keep the resource name nvidia.com/gpu so quotas and requests stay uniform.
                "renameByDefault": False,
                # A container asking for 2 shares would get no more compute: refuse it instead.
                "failRequestsGreaterThanOne": True,
                "resources": [{"name": GPU_RESOURCE, "replicas": replicas}],
            }
        }
    return config
