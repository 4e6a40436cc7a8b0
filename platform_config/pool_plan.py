"""What each GPU pool's nodes offer, resolved once from the config (pure): per pool its `PoolCapacity` (the GPU
resources one node advertises and what the scheduler can place on it), and the GPU resources the pools provide
together (`gpu_resources_provided`), which every tenant's quotas name. The config checks read these before there is
a plan; components/plan.py keeps them in the plan's pool slices, which the node pools and the tenants' quotas read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from .capacity import PoolSupply, node_allocatable, pool_supply
from .models import NodePoolConfig, PlatformConfig


@dataclass(frozen=True)
class PoolCapacity:
    pool: NodePoolConfig
    # The extended resources one node advertises, what kind of GPU capacity each is, and the node's instance type.
    supply: PoolSupply
    # What the scheduler can place on one node: its CPU, memory, disk and pods after the kubelet's reserve and the
    # node agents, and its GPU resources (capacity.node_allocatable).
    allocatable: Mapping[str, Decimal]

    @property
    def gpu_resources(self) -> tuple[str, ...]:
        """The GPU resource names one node advertises, sorted."""
        return tuple(sorted(self.supply.per_node))

    @property
    def advertised(self) -> dict[str, int]:
        """Each GPU resource one node advertises and how many, by name."""
        return dict(sorted(self.supply.per_node.items()))


def pool_capacity(pool: NodePoolConfig) -> PoolCapacity:
    return PoolCapacity(pool, pool_supply(pool), node_allocatable(pool))


def pool_capacities(config: PlatformConfig) -> dict[str, PoolCapacity]:
    """Each GPU pool's capacity, by pool name, in the stack's order."""
    return {pool.name: pool_capacity(pool) for pool in config.node_pools}


def gpu_resources_provided(config: PlatformConfig) -> tuple[str, ...]:
    """Every GPU resource name any pool provides, sorted: a ResourceQuota limits only what it lists, so each tenant's
    quotas name all of them (0 where it has none)."""
    return tuple(sorted({resource for pool in config.node_pools for resource in pool_supply(pool).per_node}))
