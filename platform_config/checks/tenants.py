"""Tenants: their quotas, pools, groups and S3 data.

`resource_key` is the key path of a resource inside a quota block, which the capacity and batch rules name too.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Iterator

from ..capacity import budget_resources
from ..errors import ConfigIssue
from ..gpu_catalog import GPU_RESOURCE, MIG_RESOURCE_PREFIX, mig_resource
from ..models import PlatformConfig, ResourceBudget
from ..pool_plan import gpu_resources_provided
from ..s3_locations import s3_overlap, s3_parts, s3_within
from ..tenant_data import tenant_s3_locations
from .models import placed_models


def check_tenants(config: PlatformConfig) -> Iterator[ConfigIssue]:
    pool_names = {p.name for p in config.node_pools}
    gpu_kinds = gpu_resources_provided(config)
    mig_provided = sorted(r.removeprefix(MIG_RESOURCE_PREFIX) for r in gpu_kinds if r.startswith(MIG_RESOURCE_PREFIX))
    for index, tenant in enumerate(config.tenants):
        for p_index, pool in enumerate(tenant.pools or []):
            if pool not in pool_names:
                yield ConfigIssue(
                    ("tenants", index, "pools", p_index), f"unknown node pool {pool!r}; pools: {', '.join(sorted(pool_names))}"
                )
        for key in ("quota", "experimentQuota"):
            budget: ResourceBudget = getattr(tenant, "quota" if key == "quota" else "experiment_quota")
            for profile in budget.mig:
                if mig_resource(profile) not in gpu_kinds:
                    yield ConfigIssue(
                        ("tenants", index, key, "mig", profile),
                        f"no node pool provides MIG profile {profile!r}; provided: {', '.join(mig_provided) or 'none'}",
                    )
        quota = budget_resources(tenant.quota)
        for resource, amount in budget_resources(tenant.experiment_quota).items():
            if amount > quota.get(resource, Decimal(0)):
                yield ConfigIssue(
                    ("tenants", index, "experimentQuota", *resource_key(resource)),
                    f"experiments may use at most the tenant's quota: {amount} > {quota.get(resource, 0)} for {resource}",
                )
        if tenant.experiment_quota.pods is not None and tenant.quota.pods is not None:
            if tenant.experiment_quota.pods > tenant.quota.pods:
                yield ConfigIssue(
                    ("tenants", index, "experimentQuota", "pods"), "experiments may use at most the tenant's pods quota"
                )


def resource_key(resource: str) -> tuple[str, ...]:
    """The key path of a resource inside a quota block: ("gpu",), ("mig", "1g.10gb"), ("cpu",)."""
    if resource == GPU_RESOURCE:
        return ("gpu",)
    if resource.startswith(MIG_RESOURCE_PREFIX):
        return ("mig", resource.removeprefix(MIG_RESOURCE_PREFIX))
    return (resource,)


def check_tenant_groups(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A group belongs to one tenant: its members would otherwise see, and restart, another
    tenant's workloads as well."""
    owners: dict[str, str] = {}
    for index, tenant in enumerate(config.tenants):
        for g_index, group in enumerate(tenant.groups):
            owner = owners.setdefault(group, tenant.name)
            if owner != tenant.name:
                yield ConfigIssue(
                    ("tenants", index, "groups", g_index),
                    f"group {group!r} is already tenant {owner!r}'s: a group belongs to one tenant",
                )


def check_tenant_s3_data(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """Data belongs to its tenant (platform_config/tenant_data.py): its prefixes overlap no other tenant's and none is
    in the weight mirror's bucket, and every S3 location its workloads name lies under one of them."""
    mirror = config.weight_mirror.bucket if config.weight_mirror is not None else None
    claimed: list[tuple[str, str]] = []
    for t_index, tenant in enumerate(config.tenants):
        for p_index, prefix in enumerate(tenant.s3_prefixes):
            key = ("tenants", t_index, "s3Prefixes", p_index)
            if mirror is not None and s3_parts(prefix)[0] == mirror:
                yield ConfigIssue(
                    key,
                    f"{prefix} is in the weight mirror's bucket {mirror!r}, the platform's: the mirror writes each "
                    "tenant's copies and its servers read them under <bucket>/<tenant>/; a tenant never names it",
                )
            for owner, other in claimed:
                if s3_overlap(prefix, other):
                    yield ConfigIssue(key, f"{prefix} overlaps {other} of tenant {owner!r}: data belongs to one tenant")
        claimed.extend((tenant.name, prefix) for prefix in tenant.s3_prefixes)
    prefixes = {tenant.name: tenant.s3_prefixes for tenant in config.tenants}
    for location in tenant_s3_locations(config):
        own = prefixes.get(location.tenant)
        if own is None or any(s3_within(location.uri, prefix) for prefix in own):
            continue  # an unknown tenant is reported where it is named
        declared = ", ".join(own) if own else "none"
        yield ConfigIssue(
            location.key,
            f"{location.uri} is not under tenant {location.tenant!r}'s s3Prefixes ({declared}): a tenant's workloads read "
            f"and write only its own data; add the prefix to tenants[{location.tenant}].s3Prefixes if it is the tenant's",
        )


def check_tenant_pools(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A model runs on a pool its tenant may use."""
    tenants = {t.name: t for t in config.tenants}
    for index, model, _ in placed_models(config):
        tenant = tenants.get(model.tenant)
        if tenant is not None and tenant.pools is not None and model.pool not in tenant.pools:
            yield ConfigIssue(
                ("models", index, "pool"),
                f"tenant {tenant.name!r} may only use pools {', '.join(tenant.pools)}, not {model.pool!r}",
            )
