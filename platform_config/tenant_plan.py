"""Each tenant's budgets, resolved once from the config (pure): what its pods may hold at once in all, at production
priority (its quota less the share its experiments keep) and at experiment priority (that share), each per resource
and in pods, with every GPU resource a pool provides named (0 where it has none). The tenant's ResourceQuotas state
these (components/specs/tenancy.py), and the config checks hold its models' peaks to them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from .capacity import budget_resources
from .models import PlatformConfig, TenantConfig
from .pool_plan import gpu_resources_provided


@dataclass(frozen=True)
class PriorityBudget:
    """What pods of one priority class (or all of a tenant's pods) may hold at once: an amount per resource their
    quota limits, and a number of pods (None: no limit)."""

    resources: Mapping[str, Decimal]
    pods: int | None


@dataclass(frozen=True)
class TenantPlan:
    tenant: TenantConfig
    # The tenant's whole quota; production's (`quota` less `experimentQuota`, reserved for production pods); the
    # experiments' share (`experimentQuota`; pods it does not state: none).
    total: PriorityBudget
    production: PriorityBudget
    experiment: PriorityBudget
    # Every GPU resource any pool provides: a ResourceQuota limits only what it lists, so each budget names them all.
    gpu_resources: tuple[str, ...]

    def budget(self, *, experiment: bool) -> PriorityBudget:
        """The budget of the tenant's pods of one priority class."""
        return self.experiment if experiment else self.production

    @property
    def unclassified(self) -> PriorityBudget:
        """Pods of any other priority class, or none: no GPU at all."""
        return PriorityBudget({resource: Decimal(0) for resource in self.gpu_resources}, None)


def tenant_plan(tenant: TenantConfig, gpu_resources: tuple[str, ...]) -> TenantPlan:
    zero = {resource: Decimal(0) for resource in gpu_resources}
    quota = budget_resources(tenant.quota)
    reserved = budget_resources(tenant.experiment_quota)
    reserved_pods = tenant.experiment_quota.pods or 0
    production = {resource: amount - reserved.get(resource, Decimal(0)) for resource, amount in quota.items()}
    return TenantPlan(
        tenant=tenant,
        total=PriorityBudget({**zero, **quota}, tenant.quota.pods),
        production=PriorityBudget(
            {**zero, **production}, None if tenant.quota.pods is None else tenant.quota.pods - reserved_pods
        ),
        experiment=PriorityBudget({**zero, **reserved}, reserved_pods),
        gpu_resources=gpu_resources,
    )


def tenant_plans(config: PlatformConfig) -> dict[str, TenantPlan]:
    """Each tenant's plan, by tenant name, in the stack's order."""
    gpu_resources = gpu_resources_provided(config)
    return {tenant.name: tenant_plan(tenant, gpu_resources) for tenant in config.tenants}
