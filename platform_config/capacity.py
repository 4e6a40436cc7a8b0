"""What each GPU pool advertises, the capacity table (tenant quotas against pool supply), and
what one node of a GPU pool or of the EKS system node group offers pods.

Pure functions over the typed config; used by the config checks (over capacity is an error), by
the components (what a node advertises is exported) and by the preview report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal

from .cold_start import instance_of, node_disk_gib
from .cpu_instances import CPU_INSTANCE_TYPES
from .gpu_catalog import (
    GPU_RESOURCE,
    InstanceType,
    MigDeviceLayout,
    MigGeometryDef,
    builtin_mig_configs,
    mig_resource,
)
from .models import (
    SYSTEM_POOL_NAME,
    MigGeometry,
    NodePoolConfig,
    PlatformConfig,
    ResourceBudget,
    SystemNodeGroup,
    TenantConfig,
)
from .quantity import parse_quantity, show_amount

WHOLE_GPU = "whole GPU"
MIG_SLICE = "MIG slice"
SHARE = "time-sliced share"


def custom_geometry(geometry: MigGeometry) -> MigGeometryDef:
    return MigGeometryDef(
        geometry.name,
        tuple(
            MigDeviceLayout(group.gpus, group.mig_enabled, tuple(sorted(group.profiles.items()))) for group in geometry.devices
        ),
    )


def pool_geometry(pool: NodePoolConfig) -> MigGeometryDef | None:
    """The MIG geometry a pool's nodes are labelled with; None when the pool does not use MIG
    (or names a config this GPU does not have: `checks` reports that)."""
    sharing = pool.sharing
    if sharing.mode != "mig":
        return None
    if sharing.mig_geometry is not None:
        return custom_geometry(sharing.mig_geometry)
    return builtin_mig_configs(instance_of(pool).gpu).get(sharing.mig_config or "")


@dataclass(frozen=True)
class PoolSupply:
    pool: str
    instance: InstanceType
    max_nodes: int
    # Extended resources one node advertises, and what kind of GPU capacity each one is.
    per_node: dict[str, int]
    kinds: dict[str, str]

    def at_max(self, resource: str) -> int:
        return self.per_node.get(resource, 0) * self.max_nodes


def pool_supply(pool: NodePoolConfig) -> PoolSupply:
    instance = instance_of(pool)
    per_node: dict[str, int] = {}
    kinds: dict[str, str] = {}
    sharing = pool.sharing
    if sharing.mode == "timeSlicing":
        per_node[GPU_RESOURCE] = instance.gpus * (sharing.replicas or 1)
        kinds[GPU_RESOURCE] = f"{SHARE} ({sharing.replicas} per GPU)"
    elif sharing.mode == "mig":
        geometry = pool_geometry(pool)
        for layout in geometry.layouts if geometry else ():
            gpus = instance.gpus if layout.gpus is None else layout.gpus
            if not layout.mig_enabled:
                per_node[GPU_RESOURCE] = per_node.get(GPU_RESOURCE, 0) + gpus
                kinds[GPU_RESOURCE] = WHOLE_GPU
                continue
            for profile, count in layout.profiles:
                resource = mig_resource(profile)
                per_node[resource] = per_node.get(resource, 0) + count * gpus
                kinds[resource] = MIG_SLICE
    else:
        per_node[GPU_RESOURCE] = instance.gpus
        kinds[GPU_RESOURCE] = WHOLE_GPU
    return PoolSupply(pool.name, instance, pool.max_size, per_node, kinds)


def budget_resources(budget: ResourceBudget) -> dict[str, Decimal]:
    """A quota as Kubernetes resource names -> amounts (GPU kinds, cpu, memory)."""
    amounts: dict[str, Decimal] = {}
    if budget.gpu:
        amounts[GPU_RESOURCE] = Decimal(budget.gpu)
    for profile, count in budget.mig.items():
        if count:
            amounts[mig_resource(profile)] = Decimal(count)
    if budget.cpu is not None:
        amounts["cpu"] = parse_quantity(budget.cpu)
    if budget.memory is not None:
        amounts["memory"] = parse_quantity(budget.memory)
    return amounts


@dataclass
class CapacityRow:
    resource: str
    kind: str
    supply_by_pool: dict[str, Decimal] = field(default_factory=dict)
    demand_by_tenant: dict[str, Decimal] = field(default_factory=dict)

    @property
    def supply(self) -> Decimal:
        return sum(self.supply_by_pool.values(), Decimal(0))

    @property
    def demand(self) -> Decimal:
        return sum(self.demand_by_tenant.values(), Decimal(0))


def overcommit_ratio(config: PlatformConfig) -> Decimal:
    """How many times what the pools give at maxSize the summed quotas may hold (`capacity.overcommitRatio`)."""
    return Decimal(str(config.capacity.overcommit_ratio))


def within_capacity(demand: Decimal, supply: Decimal, ratio: Decimal) -> bool:
    """Whether quotas holding `demand` fit a `supply` overcommitted `ratio` times: the capacity table's verdict and
    the capacity check's rule."""
    return demand <= supply * ratio


def capacity_table(config: PlatformConfig) -> list[CapacityRow]:
    """One row per resource kind: what the pools give at max size against the summed quotas."""
    rows: dict[str, CapacityRow] = {}

    def row(resource: str, kind: str) -> CapacityRow:
        if resource not in rows:
            rows[resource] = CapacityRow(resource, kind)
        elif kind not in rows[resource].kind.split(" + "):
            rows[resource].kind += f" + {kind}"
        return rows[resource]

    for pool in config.node_pools:
        supply = pool_supply(pool)
        for resource, per_node in supply.per_node.items():
            # The kind names the GPU model: H100 and L4 GPUs are both nvidia.com/gpu, and a quota
            # cannot tell them apart (each model's peak is checked against its own pool).
            kind = f"{supply.kinds[resource]} {supply.instance.gpu.name}"
            row(resource, kind).supply_by_pool[pool.name] = Decimal(per_node * pool.max_size)
        instance = supply.instance
        row("cpu", "node CPU").supply_by_pool[pool.name] = Decimal(instance.vcpus * pool.max_size)
        row("memory", "node memory").supply_by_pool[pool.name] = Decimal(instance.memory_gib * pool.max_size) * 2**30
    for tenant in config.tenants:
        for resource, amount in budget_resources(tenant.quota).items():
            if resource not in rows:
                rows[resource] = CapacityRow(resource, "not provided by any pool")
            rows[resource].demand_by_tenant[tenant.name] = amount
    return sorted(rows.values(), key=lambda r: (r.resource in ("cpu", "memory"), r.resource))


def capacity_report(
    config: PlatformConfig, pickers_by_tenant: Mapping[str, Mapping[str, Decimal]] | None = None
) -> list[dict[str, object]]:
    """The capacity table as plain data (a stack output and a preview report section);
    `pickers_by_tenant`: what each tenant's endpoint pickers hold at peak, per resource (part of
    its quota, on the system pool)."""
    ratio = overcommit_ratio(config)
    rows = []
    for row in capacity_table(config):
        pickers = {
            tenant: amounts[row.resource] for tenant, amounts in (pickers_by_tenant or {}).items() if amounts.get(row.resource)
        }

        def show(value: Decimal, resource: str = row.resource) -> str:
            return show_amount(resource, value)

        rows.append(
            {
                "resource": row.resource,
                "kind": row.kind,
                "supply": show(row.supply),
                "supplyByPool": {pool: show(v) for pool, v in row.supply_by_pool.items()},
                "demand": show(row.demand),
                "demandByTenant": {tenant: show(v) for tenant, v in row.demand_by_tenant.items()},
                "endpointPickersByTenant": {tenant: show(v) for tenant, v in pickers.items()},
                "overcommitRatio": float(ratio),
                "utilisationPercent": round(float(row.demand / row.supply * 100)) if row.supply else None,
                "withinCapacity": within_capacity(row.demand, row.supply, ratio),
            }
        )
    return rows + _system_node_rows(config, pickers_by_tenant or {})


def _system_node_rows(config: PlatformConfig, pickers_by_tenant: Mapping[str, Mapping[str, Decimal]]) -> list[dict[str, object]]:
    """The EKS system node group against what the tenants' endpoint pickers hold there at peak
    (the pickers' part of the quotas; the platform's controllers run there too, which the config
    check and the admission stage count, `components/cluster.py`)."""
    eks = config.cluster.eks
    if eks is None or not pickers_by_tenant:
        return []
    group = eks.system_node_group
    instance = CPU_INSTANCE_TYPES[group.instance_type]
    rows: list[dict[str, object]] = []
    for resource, per_node in (("cpu", Decimal(instance.vcpus)), ("memory", Decimal(instance.memory_gib) * 2**30)):
        supply = per_node * group.max_size
        held = {tenant: amounts[resource] for tenant, amounts in pickers_by_tenant.items() if amounts.get(resource)}
        demand = sum(held.values(), Decimal(0))
        rows.append(
            {
                "resource": f"{resource} ({SYSTEM_POOL_NAME} nodes)",
                "kind": f"node {'CPU' if resource == 'cpu' else 'memory'} {group.instance_type}",
                "supply": show_amount(resource, supply),
                "supplyByPool": {SYSTEM_POOL_NAME: show_amount(resource, supply)},
                "demand": show_amount(resource, demand),
                "demandByTenant": {tenant: show_amount(resource, v) for tenant, v in held.items()},
                "endpointPickersByTenant": {tenant: show_amount(resource, v) for tenant, v in held.items()},
                "overcommitRatio": 1.0,
                "utilisationPercent": round(float(demand / supply * 100)),
                "withinCapacity": demand <= supply,
            }
        )
    return rows


# --- what one node of a pool offers pods ------------------------------------------------------


# The kubelet's reserve on the EKS-optimized AMIs (awslabs/amazon-eks-ami, nodeadm's kubelet
# config): kube-reserved memory 11 MiB per pod + 255 MiB, with max pods capped at 110 on
# instances of up to 30 vCPUs and at 250 above; CPU 6 % of the first core, 1 % of the second,
# 0.5 % of the next two and 0.25 % of the rest; ephemeral storage 1 GiB; hard eviction at
# 100 MiB of memory and 10 % of the disk.
def max_pods(vcpus: int) -> int:
    return 110 if vcpus <= 30 else 250


EVICTION_MEMORY = Decimal(100 * 2**20)
# What the node agents every GPU node runs ask for (aws-node, kube-proxy, the Pod Identity agent,
# istio-cni, the GPU Operator's device plugin, GFD, DCGM exporter, MIG manager and validator,
# NFD worker, node-exporter): an allowance, not a measurement; their charts set the figures.
GPU_NODE_AGENTS = {"cpu": Decimal(1), "memory": Decimal(2 * 2**30)}
# The same on a system node, which runs only the agents every node runs: aws-node (25m of CPU,
# aws/amazon-vpc-cni-k8s v1.23.1 charts/aws-vpc-cni/values.yaml), kube-proxy, the Pod Identity
# agent, istio-cni (100m and 100Mi, istio/istio 1.30.3 manifests/charts/istio-cni/values.yaml),
# the GPU Operator's NFD worker and node-exporter (no requests): an allowance about twice the
# requests known.
SYSTEM_NODE_AGENTS = {"cpu": Decimal("0.5"), "memory": Decimal(2**30)}
# Disk the container images (the vLLM image alone is about 10 GiB) and logs take.
IMAGE_DISK_GIB = 40
# A system node's disk: its launch template sizes no volume, so the AMI's root volume, which is
# EKS's default node disk (CreateNodegroup `diskSize`: 20 GiB); the controllers' images and logs
# take an allowance of half of it.
SYSTEM_DISK_GIB = 20
SYSTEM_IMAGE_DISK_GIB = 10


def _kube_reserved_cpu(vcpus: int) -> Decimal:
    steps = ((1, Decimal("0.06")), (1, Decimal("0.01")), (2, Decimal("0.005")))
    reserved, left = Decimal(0), Decimal(vcpus)
    for cores, share in steps:
        taken = min(left, Decimal(cores))
        reserved += taken * share
        left -= taken
    return reserved + left * Decimal("0.0025")


def eks_node_allocatable(
    vcpus: int, memory_gib: int, disk_gib: int, *, agents: dict[str, Decimal], image_disk_gib: int
) -> dict[str, Decimal]:
    """What the scheduler can place on one EKS node of this size: its CPU, memory and disk less
    the kubelet's reserve and eviction thresholds, the node `agents` and the images' disk."""
    pods = max_pods(vcpus)
    memory_reserved = Decimal((11 * pods + 255) * 2**20) + EVICTION_MEMORY
    disk = Decimal(disk_gib) * 2**30
    return {
        "cpu": Decimal(vcpus) - _kube_reserved_cpu(vcpus) - agents["cpu"],
        "memory": Decimal(memory_gib) * 2**30 - memory_reserved - agents["memory"],
        # Whole bytes, as the kubelet reports them.
        "ephemeral-storage": (disk * Decimal("0.9")).to_integral_value(ROUND_FLOOR) - Decimal((1 + image_disk_gib) * 2**30),
        "pods": Decimal(pods),
    }


def node_allocatable(pool: NodePoolConfig) -> dict[str, Decimal]:
    """What the scheduler can place on one node of the pool: the EKS node's allocatable (its disk
    the weight cache's: the instance store's RAID0 or the root volume), plus the GPU resources the
    pool's sharing advertises."""
    supply = pool_supply(pool)
    instance = supply.instance
    allocatable = eks_node_allocatable(
        instance.vcpus, instance.memory_gib, node_disk_gib(pool), agents=GPU_NODE_AGENTS, image_disk_gib=IMAGE_DISK_GIB
    )
    allocatable.update({resource: Decimal(count) for resource, count in supply.per_node.items()})
    return allocatable


def system_node_allocatable(group: SystemNodeGroup) -> dict[str, Decimal]:
    """What the scheduler can place on one node of the EKS system node group, before the
    platform's controllers (components/cluster.py reserves those)."""
    instance = CPU_INSTANCE_TYPES[group.instance_type]
    return eks_node_allocatable(
        instance.vcpus, instance.memory_gib, SYSTEM_DISK_GIB, agents=SYSTEM_NODE_AGENTS, image_disk_gib=SYSTEM_IMAGE_DISK_GIB
    )


# --- batch queues (Kueue) ------------------------------------------------------------------


@dataclass(frozen=True)
class BatchQueueRow:
    """One tenant's batch quota on one pool, as its Kueue ClusterQueue states it: the nominal
    quota per resource, and how much more it may borrow from the cohort (None: no limit)."""

    tenant: str
    pool: str
    nominal: dict[str, Decimal]
    borrowing_limit: dict[str, Decimal | None]
    # What the pool offers at maxSize, which every tenant's nominal quota on it shares.
    supply: PoolSupply


@dataclass(frozen=True)
class BatchBudget:
    """A tenant's batch quotas against its experiment share: batch pods run at inference-experiment priority, so the
    namespace's experiment quota (`experimentQuota`) bounds all its batch quotas together. The batch checks hold the
    quotas to it and the batch queues' borrowing limits are what it leaves (`batch_budget`)."""

    # The batch quotas summed over the pools, per resource.
    total: Mapping[str, Decimal]
    # The experiment quota, per resource it states.
    experiment: Mapping[str, Decimal]

    def allowed(self, resource: str) -> Decimal:
        """What the experiment quota allows of `resource` (0 where it states none)."""
        return self.experiment.get(resource, Decimal(0))

    def room(self, resource: str) -> Decimal | None:
        """What the experiment quota leaves of `resource` beyond the whole batch budget (negative: the batch quotas
        exceed it); None where it does not limit the resource: CPU or memory it does not state (a GPU resource it does
        not state it allows none of)."""
        if resource in ("cpu", "memory") and resource not in self.experiment:
            return None
        return self.allowed(resource) - self.total.get(resource, Decimal(0))


def batch_budget(tenant: TenantConfig) -> BatchBudget:
    """The tenant's batch quotas, summed over its pools, against its experiment quota."""
    total: dict[str, Decimal] = {}
    for budget in tenant.batch_quota.values():
        for resource, amount in budget_resources(budget).items():
            total[resource] = total.get(resource, Decimal(0)) + amount
    return BatchBudget(total, budget_resources(tenant.experiment_quota))


def batch_tenants(rows: Sequence[BatchQueueRow]) -> list[str]:
    """The tenants with a batch quota (one ClusterQueue each), in the stack's order."""
    return list(dict.fromkeys(row.tenant for row in rows))


def _pool_size(pool: NodePoolConfig) -> dict[str, Decimal]:
    instance = instance_of(pool)
    return {"cpu": Decimal(instance.vcpus * pool.max_size), "memory": Decimal(instance.memory_gib * pool.max_size) * 2**30}


def batch_queue_rows(config: PlatformConfig) -> list[BatchQueueRow]:
    """Per tenant and pool of its `batchQuota`: nominal quota = that budget (CPU or memory it does
    not state: the pool's size at maxSize, so only the namespace quota bounds them); borrowing
    limit = what the tenant's experiment quota leaves beyond its whole batch budget (batch pods
    run at inference-experiment priority, so that ResourceQuota would refuse more pods anyway;
    a resource the experiment quota does not state is not limited there, nor here)."""
    pools = {p.name: p for p in config.node_pools}
    rows: list[BatchQueueRow] = []
    for tenant in config.tenants:
        if not tenant.batch_quota:
            continue
        headroom = batch_budget(tenant)
        for pool_name, budget in tenant.batch_quota.items():
            pool = pools.get(pool_name)
            if pool is None:
                continue  # an unknown pool is a config issue (check_batch_quota_pools)
            stated = budget_resources(budget)
            supply = pool_supply(pool)
            nominal = {**{r: Decimal(0) for r in supply.per_node}, **_pool_size(pool), **stated}
            limits: dict[str, Decimal | None] = {}
            for resource in nominal:
                room = headroom.room(resource)
                limits[resource] = None if room is None else max(Decimal(0), room)
            rows.append(BatchQueueRow(tenant.name, pool_name, nominal, limits, supply))
    return rows


def batch_queue_report(rows: Sequence[BatchQueueRow]) -> list[dict[str, object]]:
    """Per pool and GPU resource of the batch queues (`batch_queue_rows`, as the plan holds them): each tenant's
    nominal batch quota, what it may borrow (its borrowing limit, at most the other tenants' nominal quota there) and
    what it reclaims (its nominal quota, lent while idle and taken back by preemption within the cohort)."""
    report: list[dict[str, object]] = []
    for pool_name in sorted({r.pool for r in rows}):
        on_pool = [r for r in rows if r.pool == pool_name]
        supply = on_pool[0].supply
        for resource in sorted(supply.per_node):
            total = sum((r.nominal.get(resource, Decimal(0)) for r in on_pool), Decimal(0))
            tenants = {}
            for row in on_pool:
                nominal = row.nominal.get(resource, Decimal(0))
                others = total - nominal
                limit = row.borrowing_limit.get(resource)
                tenants[row.tenant] = {
                    "nominal": int(nominal),
                    "borrowable": int(others if limit is None else min(limit, others)),
                    "reclaimable": int(nominal),
                }
            report.append(
                {
                    "pool": pool_name,
                    "resource": resource,
                    "supply": supply.at_max(resource),
                    "nominal": int(total),
                    "byTenant": tenants,
                    "withinSupply": total <= supply.at_max(resource),
                }
            )
    return report
