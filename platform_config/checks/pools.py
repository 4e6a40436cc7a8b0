"""Node pools' GPU sharing: MIG only on MIG-capable GPUs, known configs and profiles, custom geometries that fit."""

from __future__ import annotations

from typing import Iterator

from ..cold_start import instance_of
from ..errors import ConfigIssue
from ..gpu_catalog import builtin_mig_configs, fits_on_gpu
from ..models import PlatformConfig


def check_gpu_sharing(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """MIG only on MIG-capable GPUs, known configs and profiles, geometries that fit."""
    for index, pool in enumerate(config.node_pools):
        sharing = pool.sharing
        instance = instance_of(pool)
        gpu = instance.gpu
        here = ("nodePools", index, "sharing")
        if sharing.mode == "mig" and not gpu.supports_mig:
            yield ConfigIssue(
                (*here, "mode"),
                f"{pool.instance_type} has {gpu.name} GPUs, which do not support MIG; use mode 'timeSlicing' or 'none'",
            )
            continue
        if pool.ami_type.startswith("BOTTLEROCKET") and sharing.mode != "none":
            yield ConfigIssue(
                ("nodePools", index, "amiType"),
                "GPU sharing is configured through the GPU Operator, which this platform runs on "
                "AL2023_x86_64_NVIDIA nodes only; use that amiType or sharing mode 'none'",
            )
        if sharing.mig_config is not None:
            builtin = builtin_mig_configs(gpu)
            if sharing.mig_config not in builtin:
                yield ConfigIssue(
                    (*here, "migConfig"),
                    f"unknown MIG config {sharing.mig_config!r} for {gpu.name}; built-in configs: "
                    f"{', '.join(builtin)} (or describe one with 'migGeometry')",
                )
        if sharing.mig_geometry is not None:
            yield from _check_geometry(config, index)


def _check_geometry(config: PlatformConfig, index: int) -> Iterator[ConfigIssue]:
    pool = config.node_pools[index]
    geometry = pool.sharing.mig_geometry
    assert geometry is not None
    instance = instance_of(pool)
    gpu = instance.gpu
    here = ("nodePools", index, "sharing", "migGeometry")
    if geometry.name in builtin_mig_configs(gpu):
        yield ConfigIssue((*here, "name"), f"{geometry.name!r} is a built-in config name: give a custom geometry its own name")
    total = sum(group.gpus for group in geometry.devices)
    if total != instance.gpus:
        yield ConfigIssue(
            (*here, "devices"),
            f"device groups cover {total} GPUs but a {pool.instance_type} node has {instance.gpus}; "
            "the 'gpus' counts must add up to the GPUs per node",
        )
    for g_index, group in enumerate(geometry.devices):
        where = (*here, "devices", g_index)
        if not group.mig_enabled:
            if group.profiles:
                yield ConfigIssue((*where, "profiles"), "a group with migEnabled false takes no profiles: its GPUs stay whole")
            continue
        if not group.profiles:
            yield ConfigIssue((*where, "profiles"), "list the MIG profiles of each GPU in this group, e.g. {'1g.10gb': 7}")
            continue
        unknown = [p for p in group.profiles if p not in gpu.mig_profiles]
        if unknown:
            yield ConfigIssue(
                (*where, "profiles"),
                f"unknown MIG profile {unknown[0]!r} for {gpu.name}; allowed: {', '.join(gpu.mig_profiles)}",
            )
            continue
        if not fits_on_gpu(gpu, group.profiles):
            layout = " + ".join(f"{n} x {p}" for p, n in group.profiles.items())
            compute = sum(gpu.mig_profiles[p].compute_slices * n for p, n in group.profiles.items())
            memory = sum(gpu.mig_profiles[p].memory_slices * n for p, n in group.profiles.items())
            yield ConfigIssue(
                (*where, "profiles"),
                f"{layout} does not fit one {gpu.name}: it needs {compute}/7 compute and {memory}/8 memory slices "
                "at non-overlapping MIG placements",
            )
