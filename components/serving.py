"""The resolved plan as a whole (`Plan`) and where each tenant's workloads may connect outside the
cluster (`TenantEgress`): what components/plan.py resolves a config into and the platform component
builds from. The slices it hands each component and builder, and the serving backends' contract,
are in shapes.py; a pool's in pool_plan.py, a tenant's budgets in platform_config/tenant_plan.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from platform_config.capacity import BatchQueueRow
from platform_config.chart_images import ChartImageValues
from platform_config.models import PlatformConfig
from platform_config.prices import NodePrice, Unpriced
from platform_config.tenant_plan import TenantPlan
from platform_config.weight_mirror import MirroredRevision

from .pool_plan import PoolPlan
from .shapes import BatchJobPlan, ModelPlan, RoutePlan, ServingBackend


@dataclass(frozen=True)
class TenantEgress:
    """What a tenant's model servers and batch jobs reach outside the cluster: the S3 buckets of their
    weights and adapters (the weight mirror's among them, where they read its copies), and of the jobs' input and
    output (their workload roles'), and Hugging Face where a version, adapter, job model or job input downloads
    from it itself (never in production: platform_config/weight_mirror.py)."""

    buckets: tuple[str, ...] = ()
    hugging_face: bool = False
    # Whether it runs batch jobs (their pods get their own egress Sidecar).
    batch_jobs: bool = False


@dataclass(frozen=True)
class Plan:
    config: PlatformConfig
    models: tuple[ModelPlan, ...]
    # The longest a latency-sensitive model's first replica may take to serve (`coldStart.scaleUpBudget`).
    scale_up_budget_seconds: int
    # How long the cluster autoscaler waits for a node it asked for (platform_config/cold_start.py), which every
    # server's progress deadline includes.
    max_node_provision_seconds: int
    # What each tenant's endpoint pickers hold at peak (CPU requests, memory limits, pods): part
    # of its quota, run on the system node group.
    endpoint_pickers_by_tenant: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    # The offline batch jobs, queued through Kueue.
    batch_jobs: tuple[BatchJobPlan, ...] = ()
    # Each tenant's batch quota per pool, as its Kueue ClusterQueue states it (platform_config/capacity.py).
    batch_queues: tuple[BatchQueueRow, ...] = ()
    # The Hugging Face revisions the weight mirror copies to S3 for the tenants' pods, each once per tenant.
    mirrored_revisions: tuple[MirroredRevision, ...] = ()
    # By tenant, where its model servers may connect outside the cluster (every tenant has one).
    egress: Mapping[str, TenantEgress] = field(default_factory=dict)
    # By tenant, its budgets by priority class (its quotas state them); by GPU pool, what its nodes offer and carry.
    tenants: Mapping[str, TenantPlan] = field(default_factory=dict)
    pools: Mapping[str, PoolPlan] = field(default_factory=dict)
    # What one node costs per hour, by GPU pool, and for the system node group (None without one): the stack's
    # pricePerHour, else the dated list price (platform_config/prices.py), else why there is none.
    node_prices: Mapping[str, NodePrice | Unpriced] = field(default_factory=dict)
    system_node_price: NodePrice | Unpriced | None = None
    # By chart, the values that pin its images to the image lock's digests (platform_config/chart_images.py).
    chart_image_values: ChartImageValues = field(default_factory=dict)

    @property
    def routes(self) -> tuple[RoutePlan, ...]:
        return tuple(m.route for m in self.models)

    def model(self, name: str) -> ModelPlan:
        return next(m for m in self.models if m.model.name == name)

    def node_prices_per_hour(self) -> dict[str, Decimal]:
        """Each priced GPU pool's price per node-hour: the one figure the cost report, the overview dashboard's cost
        panel and the performance stage's cost per token read."""
        return {name: price.per_hour for name, price in self.node_prices.items() if isinstance(price, NodePrice)}

    def backends(self) -> tuple[ServingBackend, ...]:
        """The backends the stack's models use, each once, in the models' order."""
        return tuple({m.backend.mode: m.backend for m in self.models}.values())

    def hugging_face_token_tenants(self) -> set[str]:
        """The tenants whose running servers or batch jobs read their own Hugging Face token: their pods download from
        Hugging Face themselves (never in production, where the weight mirror does)."""
        servers = {s.namespace for m in self.models for s in m.servers if s.hugging_face_token}
        return servers | {job.namespace for job in self.batch_jobs if job.hugging_face_token}
