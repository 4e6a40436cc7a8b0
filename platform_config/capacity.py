"""What each GPU pool advertises, and the capacity table: tenant quotas against pool supply.

Pure functions over the typed config; used by the config checks (over capacity is an error), by
the components (what a node advertises is exported) and by the preview report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from .gpu_catalog import (
    GPU_RESOURCE,
    INSTANCE_TYPES,
    InstanceType,
    MigDeviceLayout,
    MigGeometryDef,
    builtin_mig_configs,
    mig_resource,
)
from .models import MigGeometry, NodePoolConfig, PlatformConfig, ResourceBudget
from .quantity import parse_quantity

WHOLE_GPU = "whole GPU"
MIG_SLICE = "MIG slice"
SHARE = "time-sliced share"


def instance_of(pool: NodePoolConfig) -> InstanceType:
    return INSTANCE_TYPES[pool.instance_type]


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


def capacity_report(config: PlatformConfig) -> list[dict[str, object]]:
    """The capacity table as plain data (a stack output and a preview report section)."""
    ratio = Decimal(str(config.capacity.overcommit_ratio))
    rows = []
    for row in capacity_table(config):

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
                "overcommitRatio": float(ratio),
                "utilisationPercent": round(float(row.demand / row.supply * 100)) if row.supply else None,
                "withinCapacity": row.demand <= row.supply * ratio,
            }
        )
    return rows


def show_amount(resource: str, value: Decimal) -> str:
    """An amount of a resource for people: memory in Gi, everything else as a plain number."""
    if resource == "memory":
        return f"{(value / 2**30).normalize():f}Gi"
    return f"{value.normalize():f}"


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
DAEMONSET_ALLOWANCE = {"cpu": Decimal(1), "memory": Decimal(2 * 2**30)}
# Disk the container images (the vLLM image alone is about 10 GiB) and logs take.
IMAGE_DISK_GIB = 40


def _kube_reserved_cpu(vcpus: int) -> Decimal:
    steps = ((1, Decimal("0.06")), (1, Decimal("0.01")), (2, Decimal("0.005")))
    reserved, left = Decimal(0), Decimal(vcpus)
    for cores, share in steps:
        taken = min(left, Decimal(cores))
        reserved += taken * share
        left -= taken
    return reserved + left * Decimal("0.0025")


def node_allocatable(pool: NodePoolConfig) -> dict[str, Decimal]:
    """What the scheduler can place on one node of the pool: the instance's CPU, memory and disk
    less the kubelet's reserve, eviction thresholds and the node agents, plus the GPU resources
    the pool's sharing advertises."""
    supply = pool_supply(pool)
    instance = supply.instance
    pods = max_pods(instance.vcpus)
    memory_reserved = Decimal((11 * pods + 255) * 2**20) + EVICTION_MEMORY
    disk = Decimal(pool.disk_size_gib) * 2**30
    allocatable = {
        "cpu": Decimal(instance.vcpus) - _kube_reserved_cpu(instance.vcpus) - DAEMONSET_ALLOWANCE["cpu"],
        "memory": Decimal(instance.memory_gib) * 2**30 - memory_reserved - DAEMONSET_ALLOWANCE["memory"],
        "ephemeral-storage": disk * Decimal("0.9") - Decimal((1 + IMAGE_DISK_GIB) * 2**30),
        "pods": Decimal(pods),
    }
    allocatable.update({resource: Decimal(count) for resource, count in supply.per_node.items()})
    return allocatable
