"""Capacity: tenant quotas against the pools at maxSize, a replica against one node, and every model at its peak
against its pool and its tenant's quota (`check_models_fit_pools`, `check_models_fit_quotas`: the peak checks)."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Iterator

from ..capacity import (
    SHARE,
    WHOLE_GPU,
    budget_resources,
    capacity_table,
    overcommit_ratio,
    pool_supply,
    within_capacity,
)
from ..errors import ConfigIssue, format_key
from ..models import ModelConfig, PlatformConfig
from ..pool_plan import gpu_resources_provided, pool_capacity
from ..quantity import gib_quantity, parse_quantity, show_amount
from ..serving import Peak, is_experiment, replica_gpu_request
from ..tenant_plan import tenant_plan
from .models import placed_models
from .tenants import resource_key


def check_capacity(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """Summed tenant quotas against what the pools give at max size, per resource kind."""
    ratio = overcommit_ratio(config)
    tenant_index = {t.name: i for i, t in enumerate(config.tenants)}
    for row in capacity_table(config):
        if within_capacity(row.demand, row.supply, ratio):
            continue
        keys = ", ".join(
            f"{format_key(('tenants', tenant_index[t], 'quota', *resource_key(row.resource)))}={show_amount(row.resource, a)}"
            for t, a in row.demand_by_tenant.items()
        )
        pools = ", ".join(f"{p} {show_amount(row.resource, s)}" for p, s in row.supply_by_pool.items()) or "no pool provides it"
        allowed = f" x overcommit {ratio}" if ratio != 1 else ""
        yield ConfigIssue(
            ("tenants",),
            f"quotas on {row.resource} add up to {show_amount(row.resource, row.demand)} ({keys}) but the node pools "
            f"provide {show_amount(row.resource, row.supply)}{allowed} at their maxSize ({pools}); raise a pool's maxSize, "
            f"lower the quotas, or allow overcommit with {format_key(('capacity', 'overcommitRatio'))}",
        )
    # Each tenant's quota must fit the pools it may land on (its `pools`, else every pool) alone.
    for index, tenant in enumerate(config.tenants):
        usable = [p for p in config.node_pools if tenant.pools is None or p.name in tenant.pools]
        supplies = [pool_supply(p) for p in usable]
        for resource, amount in budget_resources(tenant.quota).items():
            if resource in ("cpu", "memory"):
                continue
            supply = sum(s.at_max(resource) for s in supplies)
            if not within_capacity(amount, Decimal(supply), ratio):
                yield ConfigIssue(
                    ("tenants", index, "quota", *resource_key(resource)),
                    f"{amount} of {resource} is more than the pools it may use ({', '.join(p.name for p in usable)}) "
                    f"provide at maxSize ({supply})",
                )


def check_models_fit_nodes(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A replica fits one node of its pool: the GPU resource it asks for is offered there, in
    the amount one node has, and so are its CPU and memory."""
    for index, _, _ in placed_models(config):
        yield from _check_model_fits_pool(config, index)


def _check_model_fits_pool(config: PlatformConfig, index: int) -> Iterator[ConfigIssue]:
    model = config.models[index]
    pool = next(p for p in config.node_pools if p.name == model.pool)
    supply = pool_supply(pool)
    resource, per_replica = replica_gpu_request(model)
    here = ("models", index, "resources")
    offered = ", ".join(f"{r} ({supply.kinds[r]})" for r in sorted(supply.per_node)) or "nothing"
    gpu = supply.instance.gpu
    profile = model.resources.mig_profile
    if profile is not None and profile not in gpu.mig_profiles:
        known = ", ".join(gpu.mig_profiles) or "none: it does not support MIG"
        yield ConfigIssue(
            (*here, "migProfile"),
            f"unknown MIG profile {profile!r} for the {gpu.name} GPUs of pool {pool.name!r}; MIG profiles: {known}",
        )
        return
    if resource not in supply.per_node:
        yield ConfigIssue(
            (*here, "migProfile" if model.resources.mig_profile else "gpus"),
            f"pool {pool.name!r} does not provide {resource}; it offers {offered}",
        )
        return
    kind = supply.kinds[resource]
    if kind.startswith(SHARE) and per_replica != 1:
        yield ConfigIssue(
            (*here, "gpus"),
            f"pool {pool.name!r} shares GPUs by time-slicing, which gives one share per container "
            f"(failRequestsGreaterThanOne); ask for gpus: 1, not {per_replica}",
        )
    elif kind == WHOLE_GPU and per_replica > supply.per_node[resource]:
        yield ConfigIssue(
            (*here, "gpus"),
            f"a replica needs {per_replica} GPUs on one node but a {pool.instance_type} node in pool "
            f"{pool.name!r} has {supply.per_node[resource]} whole GPUs",
        )
    instance = supply.instance
    if parse_quantity(model.resources.memory) > Decimal(instance.memory_gib) * 2**30:
        yield ConfigIssue(
            (*here, "memory"), f"more memory than a {pool.instance_type} node has ({gib_quantity(instance.memory_gib)})"
        )
    if parse_quantity(model.resources.cpu) > instance.vcpus:
        yield ConfigIssue((*here, "cpu"), f"more CPU than a {pool.instance_type} node has ({instance.vcpus})")


def _runnable_models(config: PlatformConfig) -> list[tuple[int, ModelConfig]]:
    """(index, model) for every model that can run on its pool. A model that cannot is reported
    by `check_model_references` or `check_models_fit_nodes`; the peak checks leave it out so as
    not to repeat that."""
    return [(i, m) for i, m, _ in placed_models(config) if not any(_check_model_fits_pool(config, i))]


def _summed_demand(
    models: list[tuple[int, ModelConfig]], peaks: Mapping[str, Peak], *, with_pickers: bool = False
) -> dict[str, Decimal]:
    """What the models hold together at their peaks, per resource; `with_pickers`: their
    endpoint pickers' pods too (in the tenant's quota, off the GPU pool)."""
    need: dict[str, Decimal] = {}
    for _, model in models:
        peak = peaks[model.name]
        pickers = peak.picker_demand.items() if with_pickers else ()
        for resource, amount in [*peak.demand.items(), *pickers]:
            need[resource] = need.get(resource, Decimal(0)) + amount
    return need


def check_models_fit_pools(config: PlatformConfig, peaks: Mapping[str, Peak]) -> Iterator[ConfigIssue]:
    """Every model of a pool at its peak (the heaviest version at its maximum, the others at
    their share of the traffic, each rolling out) must fit what that pool's nodes offer at maxSize: H100 and L4 GPUs are both
    `nvidia.com/gpu`, so summing across pools would hide a pool that runs out (and a rollout
    surge or a node drain that can never be placed)."""
    runnable = _runnable_models(config)
    for p_index, pool in enumerate(config.node_pools):
        models = [(i, m) for i, m in runnable if m.pool == pool.name]
        if not models:
            continue
        per_node = pool_capacity(pool).allocatable
        need = _summed_demand(models, peaks)
        for resource, amount in sorted(need.items()):
            have = per_node.get(resource, Decimal(0)) * pool.max_size
            if amount <= have:
                continue
            names = ", ".join(
                f"{m.name} ({peaks[m.name].replicas} pods, "
                f"{format_key(('models', i, 'autoscaling', 'maxReplicas'))}={m.autoscaling.max_replicas})"
                for i, m in models
            )
            index, _ = max(models, key=lambda im: peaks[im[1].name].demand.get(resource, Decimal(0)))
            yield ConfigIssue(
                ("models", index, "autoscaling", "maxReplicas"),
                f"at their peak the models of pool {pool.name!r} need {show_amount(resource, amount)} of {resource} "
                f"({names}, rollouts included) but its {pool.max_size} nodes offer {show_amount(resource, have)} "
                f"({format_key(('nodePools', p_index, 'maxSize'))}={pool.max_size}); raise maxSize or lower maxReplicas",
            )


def check_models_fit_quotas(config: PlatformConfig, peaks: Mapping[str, Peak]) -> Iterator[ConfigIssue]:
    """A tenant's models, all at their peak, must fit the budget of their priority class as the
    tenant's plan, and so its quotas, state it (production: the quota minus the experiment share;
    experiments: the experiment share), or the autoscalers would ask for pods the quota rejects."""
    runnable = _runnable_models(config)
    gpu_resources = gpu_resources_provided(config)
    for t_index, tenant in enumerate(config.tenants):
        plan = tenant_plan(tenant, gpu_resources)
        for experiment in (False, True):
            models = [(i, m) for i, m in runnable if m.tenant == tenant.name and is_experiment(m) == experiment]
            if not models:
                continue
            budget_key = "experimentQuota" if experiment else "quota"
            budget = plan.budget(experiment=experiment)
            need = _summed_demand(models, peaks, with_pickers=True)
            who = "experiments" if experiment else "production"
            for resource, amount in sorted(need.items()):
                limited = resource.startswith("nvidia.com/") or resource in budget.resources
                have = budget.resources.get(resource, Decimal(0))
                if limited and amount > have:
                    yield _over_budget(config, models, t_index, budget_key, resource, amount, have, who)
            replicas = sum(peaks[m.name].replicas + peaks[m.name].picker_pods for _, m in models)
            if budget.pods is not None and replicas > budget.pods:
                yield _over_budget(config, models, t_index, budget_key, "pods", Decimal(replicas), Decimal(budget.pods), who)


def _over_budget(config, models, t_index, budget_key, resource, need, have, who) -> ConfigIssue:
    tenant = config.tenants[t_index]
    key = ("pods",) if resource == "pods" else resource_key(resource)
    shown = 5
    names = ", ".join(
        f"{m.name} ({format_key(('models', i, 'autoscaling', 'maxReplicas'))}={m.autoscaling.max_replicas})"
        for i, m in models[:shown]
    )
    if len(models) > shown:
        names += f" and {len(models) - shown} more"
    index = models[0][0] if len(models) == 1 else None
    path = ("models", index, "autoscaling", "maxReplicas") if index is not None else ("tenants", t_index, budget_key, *key)
    return ConfigIssue(
        path,
        f"at their peak (maxReplicas, rollouts, injected sidecars and endpoint pickers included) {names} hold "
        f"{show_amount(resource, need)} of "
        f"{resource}, but tenant {tenant.name!r} has "
        f"{show_amount(resource, have)} for {who} ({format_key(('tenants', t_index, budget_key, *key))}); "
        "lower maxReplicas or raise the quota",
    )
