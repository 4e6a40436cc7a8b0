"""A GPU pool's slice of the plan (`PoolPlan`): what one of its nodes offers (platform_config/pool_plan.py's
`PoolCapacity`, which the config checks read too) and what its nodes carry, the labels and the taint its node group
puts on them, which the cluster autoscaler's node template and the scheduler's view of a node (`scheduling_template`)
are made of. components/plan.py resolves it once per pool; the node pool component reads it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from platform_config.models import NodePoolConfig
from platform_config.pool_plan import PoolCapacity
from platform_config.quantity import exact_quantity


@dataclass(frozen=True)
class PoolPlan:
    capacity: PoolCapacity
    # The labels of the pool's nodes (its name, its GPU model, how its GPUs are shared) and the taint every GPU node
    # carries (components/specs/gpu_sharing.py).
    labels: Mapping[str, str]
    taint: Mapping[str, str]

    @property
    def pool(self) -> NodePoolConfig:
        return self.capacity.pool

    @property
    def scheduling_template(self) -> dict[str, Any]:
        """What the scheduler sees of one node at maxSize: the preview's admission stage bin-packs every pod template
        onto it."""
        return {
            "name": self.pool.name,
            "labels": dict(self.labels),
            "taints": [dict(self.taint)],
            "allocatable": {resource: exact_quantity(amount) for resource, amount in self.capacity.allocatable.items()},
            "maxSize": self.pool.max_size,
        }
