"""Checks that span more than one field: references, uniqueness, MIG geometry, capacity.

Each check is a pure function from the parsed config to the issues it finds, one rule each,
named like the policy that enforces the same rule at runtime where there is one; `CHECKS` runs
them all, and the loader raises one ConfigError naming every offending key. The checks of each
model at its peak (`PEAK_CHECKS`) take the peaks its serving backend sizes, and run when the
config is resolved into the plan; rules of one serving mode only live in its backend.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Callable, Iterable, Iterator, get_args

from .adapters import (
    adapter_files_bytes,
    adapter_on_own_tenants_base,
    adapter_revisions,
    adapter_tenant,
    batch_job_adapter,
    carried_adapters,
    gib,
    lora_limits,
    lora_memory,
    on_adapter_base,
    served_names,
    smallest_rank_choice,
)
from .capacity import (
    SHARE,
    WHOLE_GPU,
    budget_resources,
    capacity_table,
    instance_of,
    node_allocatable,
    pool_supply,
    production_budget,
    show_amount,
)
from .chat_templates import TemplateProblem, read_chat_template
from .cold_start import (
    S3_STREAM,
    cold_start,
    model_volume_size,
    node_disk,
    node_disk_gib,
    scale_up_budget_seconds,
    show_minutes,
    streams_weights,
)
from .errors import ConfigIssue, format_key
from .gpu_catalog import GPU_RESOURCE, INSTANCE_TYPES, MIG_RESOURCE_PREFIX, builtin_mig_configs, fits_on_gpu, mig_resource
from .memory_fit import rank_memory, weights_bytes
from .models import (
    SYSTEM_POOL_NAME,
    BatchJobConfig,
    LoraAdapter,
    ModelConfig,
    ModelSource,
    NodePoolConfig,
    PlatformConfig,
    ResourceBudget,
    ServerArgs,
    duration_seconds,
    off_the_steps,
)
from .profiles import PROFILES, TierName
from .quantity import parse_quantity
from .registry import adapter_registry_references, registry_references
from .serving import (
    CONTROL_HEADER_PREFIXES,
    DRAIN_MARGIN_SECONDS,
    GPU_MEMORY_UTILIZATION_MAX,
    Peak,
    effective_profile,
    is_experiment,
    merged_server_args,
    model_tiers,
    replica_gpu_request,
    running_versions,
    server_name,
    time_sliced_memory_share,
    user_key_headers,
)
from .tenant_data import s3_overlap, s3_parts, s3_within, tenant_s3_locations
from .weight_mirror import mirrored_source

Check = Callable[[PlatformConfig], Iterable[ConfigIssue]]

# Tiers from the most to the least latency-sensitive.
TIER_NAMES: tuple[TierName, ...] = get_args(TierName)

# Namespaces the platform itself installs into; a tenant may not take one of these names.
RESERVED_NAMESPACES = frozenset(
    {
        "default",
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "istio-system",
        "istio-ingress",
        "knative-serving",
        "knative-operator",
        "gpu-operator",
        "monitoring",
        "prometheus-adapter",
    }
)


def check_unique_names(config: PlatformConfig) -> Iterator[ConfigIssue]:
    for key, names in (
        ("nodePools", [p.name for p in config.node_pools]),
        ("tenants", [t.name for t in config.tenants]),
        ("models", [m.name for m in config.models]),
    ):
        for index, name in _duplicates(names):
            yield ConfigIssue((key, index, "name"), f"duplicate name {name!r}: names must be unique within {key}")
    for index, name in _duplicates([m.openai_name for m in config.models]):
        yield ConfigIssue(
            ("models", index, "servedModelName"),
            f"served model name {name!r} is already used by another model: clients select models by it",
        )
    for m_index, model in enumerate(config.models):
        for v_index, name in _duplicates([v.name for v in model.versions]):
            yield ConfigIssue(("models", m_index, "versions", v_index, "name"), f"duplicate version name {name!r}")
    for index, pool in enumerate(config.node_pools):
        if pool.name == SYSTEM_POOL_NAME:
            yield ConfigIssue(
                ("nodePools", index, "name"),
                f"{SYSTEM_POOL_NAME!r} is the system node group's pool label: name the GPU pool otherwise",
            )
    for index, tenant in enumerate(config.tenants):
        if tenant.name in RESERVED_NAMESPACES:
            yield ConfigIssue(
                ("tenants", index, "name"),
                f"{tenant.name!r} is a namespace the platform or Kubernetes uses; reserved: "
                f"{', '.join(sorted(RESERVED_NAMESPACES))}",
            )


def _duplicates(names: list[str]) -> Iterator[tuple[int, str]]:
    seen: set[str] = set()
    for index, name in enumerate(names):
        if name in seen:
            yield index, name
        seen.add(name)


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


def check_tenants(config: PlatformConfig) -> Iterator[ConfigIssue]:
    pool_names = {p.name for p in config.node_pools}
    gpu_kinds = _gpu_resources_provided(config)
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
                    ("tenants", index, "experimentQuota", *_budget_key(resource)),
                    f"experiments may use at most the tenant's quota: {amount} > {quota.get(resource, 0)} for {resource}",
                )
        if tenant.experiment_quota.pods is not None and tenant.quota.pods is not None:
            if tenant.experiment_quota.pods > tenant.quota.pods:
                yield ConfigIssue(
                    ("tenants", index, "experimentQuota", "pods"), "experiments may use at most the tenant's pods quota"
                )


def _budget_key(resource: str) -> tuple[str, ...]:
    """The key path of a resource inside a quota block: ("gpu",), ("mig", "1g.10gb"), ("cpu",)."""
    if resource == GPU_RESOURCE:
        return ("gpu",)
    if resource.startswith(MIG_RESOURCE_PREFIX):
        return ("mig", resource.removeprefix(MIG_RESOURCE_PREFIX))
    return (resource,)


def _gpu_resources_provided(config: PlatformConfig) -> set[str]:
    return {r for pool in config.node_pools for r in pool_supply(pool).per_node}


def check_capacity(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """Summed tenant quotas against what the pools give at max size, per resource kind."""
    ratio = Decimal(str(config.capacity.overcommit_ratio))
    tenant_index = {t.name: i for i, t in enumerate(config.tenants)}
    for row in capacity_table(config):
        if row.demand <= row.supply * ratio:
            continue
        keys = ", ".join(
            f"{format_key(('tenants', tenant_index[t], 'quota', *_budget_key(row.resource)))}={show_amount(row.resource, a)}"
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
            if amount > supply * ratio:
                yield ConfigIssue(
                    ("tenants", index, "quota", *_budget_key(resource)),
                    f"{amount} of {resource} is more than the pools it may use ({', '.join(p.name for p in usable)}) "
                    f"provide at maxSize ({supply})",
                )


def _runnable_models(config: PlatformConfig) -> list[tuple[int, ModelConfig]]:
    """(index, model) for every model that can run on its pool. A model that cannot is reported
    by `check_model_references` or `check_models_fit_nodes`; the peak checks leave it out so as
    not to repeat that."""
    return [(i, m) for i, m, _ in _placed_models(config) if not any(_check_model_fits_pool(config, i))]


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
        per_node = node_allocatable(pool)
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


def check_model_references(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A model names a tenant, a node pool and callers that exist."""
    tenants = [t.name for t in config.tenants]
    pools = [p.name for p in config.node_pools]
    for index, model in enumerate(config.models):
        if model.tenant not in tenants:
            yield ConfigIssue(("models", index, "tenant"), f"unknown tenant {model.tenant!r}; tenants: {', '.join(tenants)}")
        if model.pool not in pools:
            yield ConfigIssue(("models", index, "pool"), f"unknown node pool {model.pool!r}; pools: {', '.join(pools)}")
        for position, caller in enumerate(model.callers):
            if caller not in tenants:
                yield ConfigIssue(
                    ("models", index, "callers", position), f"unknown tenant {caller!r}; tenants: {', '.join(tenants)}"
                )


def check_release_versions(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A release's stable and canary are versions the model declares."""
    for index, model in enumerate(config.models):
        versions = {v.name for v in model.versions}
        for key, name in (("stable", model.release.stable), ("canary", model.release.canary)):
            if name is not None and name not in versions:
                yield ConfigIssue(
                    ("models", index, "release", key),
                    f"version {name!r} is not among the model's versions ({', '.join(sorted(versions))})",
                )


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
    for index, model, _ in _placed_models(config):
        tenant = tenants.get(model.tenant)
        if tenant is not None and tenant.pools is not None and model.pool not in tenant.pools:
            yield ConfigIssue(
                ("models", index, "pool"),
                f"tenant {tenant.name!r} may only use pools {', '.join(tenant.pools)}, not {model.pool!r}",
            )


def check_models_fit_nodes(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A replica fits one node of its pool: the GPU resource it asks for is offered there, in
    the amount one node has, and so are its CPU and memory."""
    for index, _, _ in _placed_models(config):
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
        yield ConfigIssue((*here, "memory"), f"more memory than a {pool.instance_type} node has ({instance.memory_gib}Gi)")
    if parse_quantity(model.resources.cpu) > instance.vcpus:
        yield ConfigIssue((*here, "cpu"), f"more CPU than a {pool.instance_type} node has ({instance.vcpus})")


def check_models_fit_quotas(config: PlatformConfig, peaks: Mapping[str, Peak]) -> Iterator[ConfigIssue]:
    """A tenant's models, all at their peak, must fit the budget of their priority class
    (production: the quota minus the experiment share; experiments: the experiment share),
    or the autoscalers would ask for pods the quota rejects."""
    runnable = _runnable_models(config)
    for t_index, tenant in enumerate(config.tenants):
        for experiment in (False, True):
            models = [(i, m) for i, m in runnable if m.tenant == tenant.name and is_experiment(m) == experiment]
            if not models:
                continue
            budget_key = "experimentQuota" if experiment else "quota"
            if experiment:
                budget, pods_budget = budget_resources(tenant.experiment_quota), tenant.experiment_quota.pods
            else:
                budget, pods_budget = production_budget(tenant)
            need = _summed_demand(models, peaks, with_pickers=True)
            who = "experiments" if experiment else "production"
            for resource, amount in sorted(need.items()):
                limited = resource.startswith("nvidia.com/") or resource in budget
                have = budget.get(resource, Decimal(0))
                if limited and amount > have:
                    yield _over_budget(config, models, t_index, budget_key, resource, amount, have, who)
            replicas = sum(peaks[m.name].replicas + peaks[m.name].picker_pods for _, m in models)
            if pods_budget is not None and replicas > pods_budget:
                yield _over_budget(config, models, t_index, budget_key, "pods", Decimal(replicas), Decimal(pods_budget), who)


def _over_budget(config, models, t_index, budget_key, resource, need, have, who) -> ConfigIssue:
    tenant = config.tenants[t_index]
    key = ("pods",) if resource == "pods" else _budget_key(resource)
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


def _placed_models(config: PlatformConfig) -> Iterator[tuple[int, ModelConfig, NodePoolConfig]]:
    """(index, model, its pool) for every model whose pool exists (check_model_references reports the rest)."""
    pools = {p.name: p for p in config.node_pools}
    for index, model in enumerate(config.models):
        if model.pool in pools:
            yield index, model, pools[model.pool]


def check_latency_sensitive_not_time_sliced(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """The policy of the same name enforces it on the rendered pods."""
    for index, model, pool in _placed_models(config):
        if PROFILES[model.profile].latency_sensitive and pool.sharing.mode == "timeSlicing":
            yield ConfigIssue(
                ("models", index, "pool"),
                f"profile {model.profile!r} is latency-sensitive but pool {pool.name!r} shares GPUs by time-slicing, "
                "which gives no isolation; use a whole-GPU or MIG pool, or a throughput profile (summarization, batch-labelling)",
            )


def check_scale_to_zero_only_where_the_profile_allows(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """Stack overrides change a profile's defaults, never its scale-to-zero rule (the
    knative-autoscaling policy holds latency-sensitive services to min-scale >= 1)."""
    for index, model, _ in _placed_models(config):
        if model.autoscaling.min_replicas == 0 and not PROFILES[model.profile].scale_to_zero:
            yield ConfigIssue(
                ("models", index, "autoscaling", "minReplicas"),
                f"profile {model.profile!r} is never scaled to zero (a cold start takes minutes); minReplicas must be at least 1",
            )


def check_batch_labelling_kept_apart(config: PlatformConfig) -> Iterator[ConfigIssue]:
    latency_pools = {m.pool for m in config.models if PROFILES[m.profile].latency_sensitive}
    latency_tenants = {m.tenant for m in config.models if PROFILES[m.profile].latency_sensitive}
    for index, model, _ in _placed_models(config):
        if model.profile != "batch-labelling":
            continue
        if model.pool in latency_pools:
            yield ConfigIssue(
                ("models", index, "pool"),
                f"batch labelling is kept apart from real-time work, but pool {model.pool!r} also serves latency-sensitive "
                "models",
            )
        if model.tenant in latency_tenants:
            yield ConfigIssue(
                ("models", index, "tenant"),
                f"batch labelling is kept apart from real-time work, but namespace {model.tenant!r} also serves "
                "latency-sensitive models",
            )


def check_time_sliced_memory_share(config: PlatformConfig) -> Iterator[ConfigIssue]:
    for index, model, pool in _placed_models(config):
        if pool.sharing.mode != "timeSlicing" or not pool.sharing.replicas:
            continue
        limit = time_sliced_memory_share(GPU_MEMORY_UTILIZATION_MAX, pool.sharing.replicas)
        servers: list[tuple[tuple[str | int, ...], ServerArgs]] = [(("models", index, "server"), model.server)]
        servers += [(("models", index, "versions", i, "server"), v.server) for i, v in enumerate(model.versions)]
        for path, server in servers:
            share = server.gpu_memory_utilization
            if share is not None and share > limit:
                yield ConfigIssue(
                    (*path, "gpuMemoryUtilization"),
                    f"{share} of the GPU's memory, but {pool.sharing.replicas} pods share each GPU of pool {pool.name!r}: "
                    f"at most {limit}",
                )


def check_inference_graceful_drain(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """The inference-graceful-drain policy's chain: preStop, then vLLM's drain, within the grace."""
    for index, model, _ in _placed_models(config):
        drain = model.drain
        if drain.pre_stop_delay_seconds + DRAIN_MARGIN_SECONDS >= drain.termination_grace_period_seconds:
            yield ConfigIssue(
                ("models", index, "drain"),
                f"preStopDelaySeconds {drain.pre_stop_delay_seconds} + {DRAIN_MARGIN_SECONDS} s leaves vLLM no time to drain "
                f"within terminationGracePeriodSeconds {drain.termination_grace_period_seconds}",
            )


def check_s3_weights_need_eks(config: PlatformConfig) -> Iterator[ConfigIssue]:
    for index, model, _ in _placed_models(config):
        if any(v.source.s3_uri for v in model.versions) and config.cluster.mode != "eks":
            yield ConfigIssue(
                ("models", index, "versions"),
                "S3 weights are read with an IAM role for the pod (EKS Pod Identity or IRSA): use a Hugging Face source "
                "on a kubeconfig cluster, or run on EKS",
            )


def check_registry_sources(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A version named in the MLflow registry needs the registry's address (`registry`), where the preview and
    `pulumi up` resolve it."""
    if config.registry.tracking_uri is not None:
        return
    for m_index, model in enumerate(config.models):
        for v_index, version in enumerate(model.versions):
            if version.source.mlflow is not None:
                yield ConfigIssue(
                    ("models", m_index, "versions", v_index, "source", "mlflow"),
                    "names a version in the MLflow registry, but the stack has no 'registry.trackingUri': add "
                    "registry: {trackingUri: https://...}",
                )


def check_registry_lock(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """Production deploys only reviewed registry versions: a stack there whose versions or adapters name the
    registry commits what they resolve to (`registry.lockFile`), which `pulumi up` holds the registry's answers to."""
    # Without a tracking URI, check_registry_sources says what is missing first.
    settings = config.registry
    if config.environment != "production" or settings.tracking_uri is None or settings.lock_file is not None:
        return
    models = config.models
    named = sorted(
        {models[m].name for m, _, _ in registry_references(config)}
        | {f"{models[m].name}/{models[m].adapters[a].name}" for m, a, _, _ in adapter_registry_references(config)}
    )
    if named:
        yield ConfigIssue(
            ("registry", "lockFile"),
            f"is required in production: {', '.join(named)} name versions in the MLflow registry; preview live and "
            "commit <out>/registry-resolution.json (e.g. as stacks/Pulumi.<stack>.registry.json), then set lockFile to it",
        )


def check_chat_templates(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A version's chat template is a committed file that matches its pin, on a server that answers chat: an embeddings
    server (`--runner pooling`) applies none."""
    for m_index, model in enumerate(config.models):
        for v_index, version in enumerate(model.versions):
            template = version.chat_template
            if template is None:
                continue
            here = ("models", m_index, "versions", v_index, "chatTemplate")
            if effective_profile(config, model).runner == "pooling":
                yield ConfigIssue(here, f"profile {model.profile!r} serves embeddings: no chat request reaches a template")
                continue
            read = read_chat_template(template)
            if isinstance(read, TemplateProblem):
                yield ConfigIssue((*here, read.key), read.message)


def check_serving_aliases_are_not_read(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """The serving aliases are the deploy's to move: a version or adapter that took its weights from one would change
    what the stack serves each time a deploy moved it (and `pulumi up` would stop on the lock file's difference)."""
    aliases = config.registry.serving_aliases
    if aliases is None:
        return
    written = {aliases.stable: "stable", aliases.canary: "canary"}
    models = config.models
    read = [(("models", m, "versions", v, "source", "mlflow", "alias"), r) for m, v, r in registry_references(config)]
    read += [
        (("models", m, "adapters", a, *(("versions", rev) if rev is not None else ()), "source", "mlflow", "alias"), r)
        for m, a, rev, r in adapter_registry_references(config)
    ]
    for key, reference in read:
        if reference.alias in written:
            yield ConfigIssue(
                key,
                f"{reference.alias!r} is registry.servingAliases.{written[reference.alias]} ({models[key[1]].name}): the "
                "deploy moves that alias to what it served, so a source may not read it; name the version, or an alias "
                "the model's authors set (e.g. champion)",
            )
    # One alias names one version: a registered model two releases take versions from (two models, a model and an
    # adapter) could be asked for two stable versions at once, which only the deploy's last step would find.
    first: dict[str, tuple[tuple[str | int, ...], str]] = {}
    for key, reference in read:
        m_index, kind, index = key[1], key[2], key[3]
        assert isinstance(m_index, int) and isinstance(index, int)
        unit = models[m_index].name if kind == "versions" else f"{models[m_index].name}/{models[m_index].adapters[index].name}"
        held = first.setdefault(reference.model, (key, unit))
        if held[1] != unit:
            yield ConfigIssue(
                key[:-1] + ("model",),
                f"registered model {reference.model!r} is {held[1]}'s too ({format_key(held[0][:-1])}): with "
                "registry.servingAliases each model and adapter takes its versions from a registered model of its own",
            )


def check_weights_cache_fits_the_node_disk(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """The model volume (`model_volume_size`) fits the disk the pool's emptyDirs are on (the instance store's RAID0,
    or the root volume): `cacheSize` where it holds the weights; on a streaming pool, which keeps one only for the LoRA
    modules a replica loads, their estimated files (`cacheSize` when the base's shape is unknown)."""
    for index, model, pool in _placed_models(config):
        size = model_volume_size(config, model)
        disk = node_disk_gib(pool)
        if size is None or parse_quantity(size) <= Decimal(disk) * 2**30:
            continue
        where = f"the {disk} GiB disk of pool {pool.name!r} ({node_disk(pool)})"
        if not streams_weights(pool):
            yield ConfigIssue(("models", index, "resources", "cacheSize"), f"{size} of weights cache does not fit {where}")
        elif adapter_files_bytes(config, model) is None:
            yield ConfigIssue(
                ("models", index, "resources", "cacheSize"),
                f"{size} of model volume for the LoRA adapters does not fit {where}: the pool streams the weights, and "
                "without the base's shape the adapters' volume is cacheSize; set lora.baseShape to size it from the "
                "adapters, or lower cacheSize",
            )
        else:
            yield ConfigIssue(
                ("models", index, "adapters"), f"the LoRA adapters' files (about {size} with margin) do not fit {where}"
            )


def check_weight_mirror_needs_eks(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """The mirror's Jobs write, and the servers read, the bucket with IAM roles for their pods (EKS Pod Identity or
    IRSA), which only an EKS cluster the platform creates gives them."""
    if config.weight_mirror is not None and config.cluster.mode != "eks":
        yield ConfigIssue(
            ("weightMirror",),
            "needs cluster.mode 'eks': the mirror's Jobs and the servers reach the bucket with IAM roles for their pods; "
            "on a kubeconfig cluster leave 'weightMirror' out and serve Hugging Face versions from a pool that caches "
            "weights (rootVolume)",
        )


def check_streamed_weights_come_from_s3(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """On a pool that streams weights (`weightCache.medium: s3Stream`) every version's weights are in S3: vLLM 0.33.0
    streams only object-store URIs (`is_runai_obj_uri`, vllm/transformers_utils/runai_utils.py) and would download a
    Hugging Face repository to local disk first, which the pod then has no room for; with a `weightMirror` a Hugging
    Face version streams from its copy there (platform_config/weight_mirror.py). An `mlflow` source is checked once
    the registry resolved it (platform_config/loader.py runs the checks again)."""
    pool_index = {p.name: i for i, p in enumerate(config.node_pools)}
    for m_index, model, pool in _placed_models(config):
        if not streams_weights(pool):
            continue
        for v_index, version in enumerate(model.versions):
            source = version.source
            if source.s3_uri is not None or source.mlflow is not None or mirrored_source(config, model, version):
                continue
            yield ConfigIssue(
                ("models", m_index, "versions", v_index, "source"),
                f"is Hugging Face ({source.huggingface!r}), but pool {pool.name!r} streams weights from S3 "
                f"(nodePools[{pool_index[pool.name]}].weightCache.medium={S3_STREAM}): allowed are 's3Uri' (with the "
                "version's subfolder as 'revision'), or 'mlflow' naming weights in S3; or set 'weightMirror' to copy "
                "Hugging Face revisions to S3; or put the model on a pool that caches weights (instanceStore, rootVolume)",
            )


def check_cold_start_within_scale_up_budget(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A latency-sensitive model whose expected cold start (image, weights, engine start on its pool's weight cache)
    is longer than the scale-up budget (`coldStart.scaleUpBudget`) keeps a warm minimum: a peak must not wait for its
    first replica."""
    budget = scale_up_budget_seconds(config)
    for index, model, _ in _placed_models(config):
        if not PROFILES[model.profile].latency_sensitive or model.autoscaling.min_replicas > 0:
            continue
        start = cold_start(config, model)
        if start.total_seconds > budget:
            yield ConfigIssue(
                ("models", index, "autoscaling", "minReplicas"),
                f"profile {model.profile!r} is latency-sensitive and a new replica takes {show_minutes(start.total_seconds)} "
                f"on pool {start.pool!r} ({start.arithmetic()}), more than the scale-up budget "
                f"coldStart.scaleUpBudget={config.cold_start.scale_up_budget}: keep a warm minimum (minReplicas > 0), or "
                "a faster weight cache (nodePools[].weightCache)",
            )


def check_object_names(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """Names built from model and version names must not collide within a namespace
    (`qwen` + `small-v1` and `qwen-small` + `v1` both make `qwen-small-v1`)."""
    seen: dict[tuple[str, str], tuple[int, str]] = {}
    for index, model in enumerate(config.models):
        names: list[tuple[str, tuple[str | int, ...]]] = [(model.name, ("models", index, "name"))]
        names += [(server_name(model, v.name), ("models", index, "versions", i, "name")) for i, v in enumerate(model.versions)]
        for name, path in names:
            key = (model.tenant, name)
            if key in seen and seen[key][0] != index:
                other = config.models[seen[key][0]].name
                yield ConfigIssue(
                    path,
                    f"objects named {name!r} would collide in namespace {model.tenant!r} with model {other!r}'s: "
                    "rename the model or the version",
                )
            seen.setdefault(key, (index, name))


def check_server_component_names(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A version's server is a Pulumi component named `<model>-<version>`, and a URN holds the
    name and the type chain, not the namespace: servers of one name in two tenants would share a
    URN, which the engine refuses."""
    seen: dict[str, int] = {}
    for index, model in enumerate(config.models):
        for v_index, version in enumerate(model.versions):
            name = server_name(model, version.name)
            first = seen.setdefault(name, index)
            other = config.models[first]
            # Same tenant: check_object_names reports it; same model name: check_unique_names.
            if first != index and other.tenant != model.tenant and other.name != model.name:
                yield ConfigIssue(
                    ("models", index, "versions", v_index, "name"),
                    f"this version's server would be named {name!r}, like a server of model {other.name!r} (tenant "
                    f"{other.tenant!r}): server names are unique across tenants; rename the model or the version",
                )


def check_batch_models(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A model's batch model exists, is another model, serves the batch tier and keeps it."""
    models = {m.name: m for m in config.models}
    for index, model in enumerate(config.models):
        if model.batch_model is None:
            continue
        here = ("models", index, "batchModel")
        target = models.get(model.batch_model)
        if target is None:
            yield ConfigIssue(here, f"unknown model {model.batch_model!r}; models: {', '.join(models)}")
        elif target.name == model.name:
            yield ConfigIssue(here, "a model cannot be its own batch model")
        elif "batch" not in model_tiers(config, target):
            yield ConfigIssue(
                here, f"model {target.name!r} does not serve the batch tier (its tiers: {', '.join(model_tiers(config, target))})"
            )
        elif target.batch_model is not None:
            yield ConfigIssue(
                here, f"model {target.name!r} sends its own batch tier elsewhere; point at the model that serves it"
            )


def check_gateway_headers(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """The headers the gateway filter sets are three different ones, no release reads one of them
    as its override or user key (a client could not set it), a release's override and user key
    differ, and none of these is under a prefix whose client values the filter strips
    (CONTROL_HEADER_PREFIXES: an override would never arrive). What a header name may not be at
    all (hop-by-hop, framing, credential, the proxies' own) is the HeaderName type's rule."""
    headers = config.traffic
    reserved = {headers.tier_header, headers.bucket_header, headers.model_header}
    if len(reserved) != 3:
        yield ConfigIssue(("traffic",), "tierHeader, bucketHeader and modelHeader must be three different headers")
    named = [
        (("traffic", key), value)
        for key, value in (
            ("tierHeader", headers.tier_header),
            ("bucketHeader", headers.bucket_header),
            ("modelHeader", headers.model_header),
        )
    ] + [
        (("models", index, "release", key), value)
        for index, model in enumerate(config.models)
        for key, value in (("overrideHeader", model.release.override_header), ("userKeyHeader", model.release.user_key_header))
    ]
    for path, value in named:
        if value.startswith(CONTROL_HEADER_PREFIXES):
            yield ConfigIssue(
                path,
                f"{value!r} is under a prefix the endpoint pickers or vLLM act on ({', '.join(CONTROL_HEADER_PREFIXES)}), "
                "whose client values the gateway strips: use another header",
            )
    for index, model in enumerate(config.models):
        for key in ("overrideHeader", "userKeyHeader"):
            value = model.release.override_header if key == "overrideHeader" else model.release.user_key_header
            if value in reserved:
                yield ConfigIssue(
                    ("models", index, "release", key), f"{value!r} is set by the gateway filter; use another header"
                )
    # The filter strips every model's user key header from clients and sets the verified caller in
    # it: an override header that is one would never arrive, or would name a user.
    user_keys = user_key_headers(config.models)
    for index, model in enumerate(config.models):
        if model.release.override_header in user_keys:
            yield ConfigIssue(
                ("models", index, "release", "overrideHeader"),
                f"{model.release.override_header!r} is a userKeyHeader (of a model, or the default), which the gateway "
                "filter sets to the verified caller; use another header",
            )


def check_gateway_tls(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """Production serves HTTPS: plain HTTP there must be an explicit choice (`plainHttp`), not a
    forgotten credential, since tokens cross it in the clear."""
    traffic = config.traffic
    if config.environment == "production" and traffic.tls_credential_name is None and not traffic.plain_http:
        yield ConfigIssue(
            ("traffic", "tlsCredentialName"),
            "production needs HTTPS: name the TLS Secret in istio-system, or set 'plainHttp: true' to serve bearer "
            "tokens over plain HTTP on purpose",
        )


def check_tier_queues(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A tier's queue wait fits in its route timeout, and a sheddable tier never ranks above one
    that is not (premium is never shed before standard)."""
    tiers = config.traffic.tiers
    for tier in TIER_NAMES:
        policy = tiers[tier]
        if duration_seconds(policy.queue_timeout) >= duration_seconds(policy.timeout):
            yield ConfigIssue(
                ("traffic", "tiers", tier, "queueTimeout"),
                f"{policy.queue_timeout} is not below the tier's timeout {policy.timeout}: a queued request would time out "
                "at the gateway (504) before it is answered 503",
            )
    for higher, lower in zip(TIER_NAMES, TIER_NAMES[1:]):
        if tiers[higher].sheddable and not tiers[lower].sheddable:
            yield ConfigIssue(
                ("traffic", "tiers", higher, "sheddable"),
                f"{higher} would be shed before {lower}, which ranks below it: make {lower} sheddable too, or {higher} not",
            )


# --- LoRA adapters (platform_config/adapters.py) -----------------------------------------------


def check_adapter_names_unique(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """The rule `adapter-names-unique` (the policy of that name enforces it on the rendered
    servers): every OpenAI name a client may send, a model's or an adapter's, names one thing
    cluster-wide, so the gateway routes it to exactly one base model. (Models' own duplicates are
    check_unique_names'.)"""
    first: dict[str, tuple[tuple[str | int, ...], str]] = {}
    for key, name, what in served_names(config):
        earlier = first.setdefault(name, (key, what))
        if earlier[0] != key and ("adapters" in key or "adapters" in earlier[0]):
            yield ConfigIssue(
                key, f"{name!r} is already the OpenAI name of {earlier[1]}: clients select models and adapters by it"
            )


def check_adapter_revisions(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """An adapter revision's name differs from its base model's version names: the model's override header names
    either, and must name one thing."""
    for m_index, model in enumerate(config.models):
        versions = {v.name for v in model.versions}
        for a_index, adapter in enumerate(model.adapters):
            for v_index, revision in enumerate(adapter.versions or []):
                if revision.name in versions:
                    yield ConfigIssue(
                        ("models", m_index, "adapters", a_index, "versions", v_index, "name"),
                        f"{revision.name!r} is also a version of model {model.name!r}: the override header "
                        f"{model.release.override_header!r} names either, so name the revision otherwise",
                    )


def check_adapter_canary_steps(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """An adapter's canary weight is 0 or one of its model's `release.steps`: its revisions go through the model's
    steps, and the policy `canary-weight-steps` holds each change to one step (the model's `release.stepOverride`
    lets a change skip them)."""
    for m_index, model in enumerate(config.models):
        for a_index, adapter in enumerate(model.adapters):
            release = adapter.release
            if release is not None and (off := off_the_steps(release.canary_weight, model.release.steps)) is not None:
                yield ConfigIssue(
                    ("models", m_index, "adapters", a_index, "release", "canaryWeight"),
                    f"{off} (the release.steps of model {model.name!r}, which its adapters' canaries go through)",
                )


def check_adapters_on_a_base_that_takes_them(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """Adapters need a generating base: a platform rule (an embeddings profile runs `--runner pooling`; vLLM 0.33.0
    also takes LoRA on pooling models that support it, vllm/config/lora.py, which the platform does not offer)."""
    for index, model in enumerate(config.models):
        if model.adapters and effective_profile(config, model).runner != "generate":
            yield ConfigIssue(
                ("models", index, "adapters"),
                f"profile {model.profile!r} runs vLLM's {effective_profile(config, model).runner} runner, which serves no "
                "LoRA adapters: put them on a generating model (chat, code-completion, rag, summarization, batch-labelling)",
            )


def check_adapter_ranks(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """No adapter a model's servers load (its own, and those of the models whose batch tier they take) has a rank above
    the model's configured `lora.maxLoraRank` (vLLM refuses to load it)."""
    indexes = {m.name: i for i, m in enumerate(config.models)}
    for m_index, model in enumerate(config.models):
        configured = model.lora.max_lora_rank
        if configured is None:
            continue
        for base, adapter in carried_adapters(config, model):
            if adapter.rank <= configured:
                continue
            fix = f"raise maxLoraRank to {smallest_rank_choice(adapter.rank)} or use a lower-rank adapter"
            if base is model:
                a_index = model.adapters.index(adapter)
                yield ConfigIssue(
                    ("models", m_index, "adapters", a_index, "rank"),
                    f"rank {adapter.rank} is above the model's lora.maxLoraRank {configured}: vLLM would refuse the "
                    f"adapter; {fix}",
                )
            else:
                yield ConfigIssue(
                    ("models", m_index, "lora", "maxLoraRank"),
                    f"{configured} is below the rank {adapter.rank} of adapter {adapter.name!r} of model {base.name!r} "
                    f"(models[{indexes[base.name]}]), whose batch tier this model's servers take: vLLM would refuse the "
                    f"adapter; {fix}",
                )


def check_adapters_resident(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A latency-sensitive profile needs every adapter module resident on the GPU (`lora.maxLoras` at least the
    modules, each adapter's stable and canary revision): a request for a module without a GPU slot waits until a
    running batch lets one go. `maxCpuLoras` is at least `maxLoras` (vLLM 0.33.0 refuses less, vllm/config/lora.py)."""
    for index, model in enumerate(config.models):
        limits = lora_limits(config, model)
        if limits is None:
            continue
        here = ("models", index, "lora")
        profile = effective_profile(config, model)
        if profile.latency_sensitive and limits.max_loras < len(limits.modules):
            yield ConfigIssue(
                (*here, "maxLoras"),
                f"{limits.max_loras} GPU slots for {len(limits.modules)} adapter modules "
                f"({', '.join(m.name for m in limits.modules)}): profile {model.profile!r} is latency-sensitive and needs "
                f"them all resident; raise maxLoras to {len(limits.modules)} or leave it unset",
            )
        if limits.max_cpu_loras < limits.max_loras:
            yield ConfigIssue(
                (*here, "maxCpuLoras"),
                f"{limits.max_cpu_loras} is below maxLoras {limits.max_loras}: vLLM refuses it (max_cpu_loras must be >= "
                "max_loras)",
            )


def check_adapter_on_own_tenants_base(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """The rule `adapter-on-own-tenants-base` (the policy of that name enforces it on the rendered servers)."""
    for m_index, model in enumerate(config.models):
        for a_index, adapter in enumerate(model.adapters):
            if not adapter_on_own_tenants_base(model, adapter):
                yield ConfigIssue(
                    ("models", m_index, "adapters", a_index, "tenant"),
                    f"{adapter.tenant!r} does not run model {model.name!r} (tenant {model.tenant!r}): an adapter never "
                    "rides on another tenant's base model; declare it on a model of its own tenant",
                )


def check_batch_model_adapters(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A model's adapters take its batch tier to its batch model's servers, which load them (README, LoRA adapters):
    those servers must run the adapters' base weights (`on_adapter_base`: each running version serves the source of
    one of the base model's versions), belong to the adapters' tenant (`adapter-on-own-tenants-base`) and run vLLM's
    generate runner. Otherwise the batch tier of its adapters is refused here, naming the key."""
    models = {m.name: m for m in config.models}
    for index, model in enumerate(config.models):
        target = models.get(model.batch_model) if model.batch_model is not None else None
        if not model.adapters or target is None or target is model:
            continue  # check_batch_models reports an unknown batch model, or the model itself
        if "batch" not in model_tiers(config, target) or target.batch_model is not None:
            continue  # and one that does not take the batch tier
        here = ("models", index, "batchModel")
        names = ", ".join(a.name for a in model.adapters)
        carried = f"its adapters ({names}) take the batch tier to the servers of model {target.name!r}, which load them"
        versions = {v.name: v.source for v in target.versions}
        for version in running_versions(target):
            if version in versions and not on_adapter_base(model, versions[version]):
                yield ConfigIssue(
                    here,
                    f"{carried}, but its version {version!r} serves other weights than every version of model "
                    f"{model.name!r}: an adapter answers correctly only on the base it was trained on (vLLM does not "
                    f"check it); give {target.name!r} the source of a version of {model.name!r}, or remove batchModel",
                )
        for adapter in model.adapters:
            # An adapter of another tenant than its base's is check_adapter_on_own_tenants_base's.
            if adapter_on_own_tenants_base(model, adapter, target) or not adapter_on_own_tenants_base(model, adapter):
                continue
            yield ConfigIssue(
                here,
                f"{carried}, but model {target.name!r} runs in tenant {target.tenant!r}, not the tenant "
                f"{adapter_tenant(model, adapter)!r} of adapter {adapter.name!r}: an adapter never rides on another "
                "tenant's servers (adapter-on-own-tenants-base); send the batch tier to a model of its tenant",
            )
        runner = effective_profile(config, target).runner
        if runner != "generate":
            yield ConfigIssue(
                here,
                f"{carried}, but profile {target.profile!r} runs vLLM's {runner} runner, which serves no LoRA adapters",
            )


def check_adapter_sources(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """S3 adapters need EKS (the workload role reads them); MLflow adapters need the registry."""
    for m_index, model in enumerate(config.models):
        for a_index, adapter in enumerate(model.adapters):
            for v_index, (_, source) in enumerate(_declared_adapter_sources(adapter)):
                key = ("models", m_index, "adapters", a_index, *(("versions", v_index) if adapter.versions else ()), "source")
                if source.s3_uri is not None and config.cluster.mode != "eks":
                    yield ConfigIssue(
                        (*key, "s3Uri"),
                        "S3 adapters are read with an IAM role for the pod (EKS Pod Identity or IRSA): use a Hugging Face "
                        "source on a kubeconfig cluster, or run on EKS",
                    )
                if source.mlflow is not None and config.registry.tracking_uri is None:
                    yield ConfigIssue(
                        (*key, "mlflow"),
                        "names a version in the MLflow registry, but the stack has no 'registry.trackingUri': add "
                        "registry: {trackingUri: https://...}",
                    )


def _declared_adapter_sources(adapter: LoraAdapter) -> list[tuple[str | None, ModelSource]]:
    """Every (revision, source) an adapter declares, running or not."""
    if adapter.source is not None:
        return [(None, adapter.source)]
    return [(v.name, v.source) for v in adapter.versions or []]


def check_weights_fit_gpu_memory(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A replica's share of the weights (`resources.weightsSize` over its GPUs) fits in what vLLM takes of one GPU, MIG
    slice or time-sliced share (platform_config/memory_fit.py): otherwise vLLM stops at load with CUDA out of
    memory, before any KV cache. The KV cache is sized, from the model's architecture, by the preview's Serving
    performance stage."""
    for index, model, pool in _placed_models(config):
        weights = weights_bytes(model)
        instance = INSTANCE_TYPES.get(pool.instance_type)
        if weights is None or instance is None:
            continue
        for version_index, version in enumerate(model.versions):
            memory = rank_memory(instance.gpu, pool, model, merged_server_args(model, version))
            if weights / memory.ranks <= memory.budget_bytes:
                continue
            device = {
                "mig": f"on its {memory.mig_profile} slice",
                "timeSliced": f"on its share of a GPU ({memory.shared_by} pods)",
            }.get(memory.kind, f"per GPU ({memory.ranks} per replica)")
            # Named where the share that does not hold them is set: the version's, the model's, else the weights.
            path: tuple[str | int, ...] = ("models", index, "resources", "weightsSize")
            if version.server.gpu_memory_utilization is not None:
                path = ("models", index, "versions", version_index, "server", "gpuMemoryUtilization")
            elif model.server.gpu_memory_utilization is not None:
                path = ("models", index, "server", "gpuMemoryUtilization")
            yield ConfigIssue(
                path,
                f"version {version.name!r}: the weights ({model.resources.weights_size}) need {gib(weights // memory.ranks)} "
                f"{device} on pool {pool.name!r}, but vLLM takes {memory.fraction:g} of the "
                f"{gib(memory.capacity_bytes)} of {instance.gpu.name}{' (its slice)' if memory.kind == 'mig' else ''}: "
                f"{gib(memory.budget_bytes)}, so they cannot load; give a replica more GPUs (resources.gpus, tensor "
                "parallel), a larger GPU or a quantized checkpoint",
            )
            break


def check_adapter_memory(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """With `lora.baseShape`, the adapters' estimated memory (platform_config/adapters.py lora_memory) fits the replica:
    vLLM's GPU slots within the replica's GPU memory share (it preallocates them before the KV cache) and its CPU cache
    of modules within the replica's memory."""
    for index, model, pool in _placed_models(config):
        memory = lora_memory(config, model)
        if memory is None:
            continue
        replica = rank_memory(instance_of(pool).gpu, pool, model, model.server).replica_bytes
        gpu = Decimal(replica) * Decimal(str(GPU_MEMORY_UTILIZATION_MAX))
        if memory.gpu_bytes >= gpu:
            yield ConfigIssue(
                ("models", index, "lora"),
                f"the adapters' GPU slots need about {gib(memory.gpu_bytes)} per replica (maxLoras x maxLoraRank), "
                f"more than the replica's GPU memory share ({show_amount('memory', gpu)}): lower maxLoras or maxLoraRank",
            )
        if memory.cpu_bytes >= parse_quantity(model.resources.memory):
            yield ConfigIssue(
                ("models", index, "resources", "memory"),
                f"{model.resources.memory} does not hold the adapters' CPU cache (about {gib(memory.cpu_bytes)}, "
                "maxCpuLoras modules): raise the memory or lower lora.maxCpuLoras",
            )


# --- batch jobs ----------------------------------------------------------------------------


def batch_gpu_request(job: BatchJobConfig) -> tuple[str, int]:
    """(GPU resource, count) one shard's pod asks for."""
    resources = job.model.resources
    if resources.mig_profile is not None:
        return mig_resource(resources.mig_profile), 1
    return GPU_RESOURCE, resources.gpus or 0


def batch_shards(job: BatchJobConfig) -> int:
    return -(-job.lines // job.shard_lines)


def shard_estimate_seconds(job: BatchJobConfig) -> float:
    """One shard's estimated run time: its lines x tokens per line / tokens per second of one
    shard's pod (the job's own measured figures; the model's load time is not counted)."""
    return min(job.shard_lines, job.lines) * job.tokens_per_line / job.tokens_per_second


def check_batch_quota_pools(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A tenant's batch quota names pools it may use; it is part of its experiment quota (batch
    pods run at experiment priority, so the namespace's ResourceQuota bounds them); and the
    tenants' nominal batch quotas fit each pool at maxSize."""
    pools = {p.name: p for p in config.node_pools}
    nominal: dict[tuple[str, str], Decimal] = {}
    for index, tenant in enumerate(config.tenants):
        total: dict[str, Decimal] = {}
        for pool_name, budget in tenant.batch_quota.items():
            key = ("tenants", index, "batchQuota", pool_name)
            if pool_name not in pools:
                yield ConfigIssue(key, f"unknown pool {pool_name!r}: give one of {', '.join(pools)}")
                continue
            if tenant.pools is not None and pool_name not in tenant.pools:
                yield ConfigIssue(key, f"tenant {tenant.name!r} may only use pools {', '.join(tenant.pools)}")
                continue
            supply = pool_supply(pools[pool_name]).per_node
            for resource, amount in budget_resources(budget).items():
                total[resource] = total.get(resource, Decimal(0)) + amount
                if resource in ("cpu", "memory"):
                    continue
                if resource not in supply:
                    yield ConfigIssue(
                        (*key, *_budget_key(resource)),
                        f"pool {pool_name!r} provides no {resource} (it provides {', '.join(sorted(supply))})",
                    )
                nominal[(pool_name, resource)] = nominal.get((pool_name, resource), Decimal(0)) + amount
        experiment = budget_resources(tenant.experiment_quota)
        for resource, amount in total.items():
            if resource in ("cpu", "memory") and resource not in experiment:
                continue
            allowed = experiment.get(resource, Decimal(0))
            if amount > allowed:
                yield ConfigIssue(
                    ("tenants", index, "batchQuota"),
                    f"batch quotas add up to {show_amount(resource, amount)} of {resource}, more than "
                    f"{format_key(('tenants', index, 'experimentQuota', *_budget_key(resource)))} "
                    f"({show_amount(resource, allowed)}): batch pods run at experiment priority, within that quota",
                )
    for (pool_name, resource), amount in sorted(nominal.items()):
        supply_at_max = pool_supply(pools[pool_name]).at_max(resource)
        if amount > supply_at_max:
            yield ConfigIssue(
                ("tenants",),
                f"batch quotas on pool {pool_name!r} add up to {amount} of {resource}, more than the pool's "
                f"{supply_at_max} at maxSize",
            )


def check_batch_job_references(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A job names a known tenant and pool, a unique name, a model source it can load, and
    S3 (its output) only on EKS, where its workload role reaches it."""
    tenants = {t.name for t in config.tenants}
    pools = {p.name: p for p in config.node_pools}
    for index, name in _duplicates([j.name for j in config.batch_jobs]):
        yield ConfigIssue(("batchJobs", index, "name"), f"duplicate name {name!r}: names must be unique within batchJobs")
    for index, job in enumerate(config.batch_jobs):
        if job.tenant not in tenants:
            yield ConfigIssue(("batchJobs", index, "tenant"), f"unknown tenant {job.tenant!r}: give one of {', '.join(tenants)}")
        if job.pool not in pools:
            yield ConfigIssue(("batchJobs", index, "pool"), f"unknown pool {job.pool!r}: give one of {', '.join(pools)}")
        else:
            resource, _ = batch_gpu_request(job)
            if resource not in pool_supply(pools[job.pool]).per_node:
                yield ConfigIssue(("batchJobs", index, "model", "resources"), f"pool {job.pool!r} provides no {resource}")
        if job.model.source.mlflow is not None:
            yield ConfigIssue(
                ("batchJobs", index, "model", "source", "mlflow"),
                "batch jobs load Hugging Face or S3 weights; MLflow references are not resolved for them yet",
            )
        if config.cluster.mode != "eks":
            yield ConfigIssue(
                ("batchJobs", index, "output"),
                "batch jobs write to S3 with their own workload role, which needs cluster.mode 'eks'",
            )
        if job.chunk_lines > job.shard_lines:
            yield ConfigIssue(
                ("batchJobs", index, "chunkLines"), f"{job.chunk_lines} is more than shardLines ({job.shard_lines})"
            )


def check_batch_job_adapter(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A job's adapter is one of `models[]`, of the job's own tenant (an adapter never runs for
    another tenant), on the job's base weights, with a source the pod can fetch as pinned (batch
    jobs resolve no MLflow references, and an S3 version folder is never a moving name)."""
    for index, job in enumerate(config.batch_jobs):
        if job.model.adapter is None:
            continue
        key = ("batchJobs", index, "model", "adapter")
        found = batch_job_adapter(config, job)
        if found is None:
            known = [a.name for m in config.models for a in m.adapters]
            yield ConfigIssue(
                key,
                f"unknown adapter {job.model.adapter!r}: give the name of an adapter in models[] "
                f"({', '.join(known) or 'none is declared'})",
            )
            continue
        model, adapter = found
        owner = adapter_tenant(model, adapter)
        if owner != job.tenant:
            yield ConfigIssue(
                key,
                f"adapter {adapter.name!r} belongs to tenant {owner!r}, not the job's tenant {job.tenant!r}: "
                "a job runs only its own tenant's adapters",
            )
        if not on_adapter_base(model, job.model.source):
            yield ConfigIssue(
                ("batchJobs", index, "model", "source"),
                f"adapter {adapter.name!r} is trained on model {model.name!r}: give the source of one of its versions "
                "(the same base weights)",
            )
        _, source = adapter_revisions(adapter)[0]
        if source.mlflow is not None:
            yield ConfigIssue(
                key,
                f"adapter {adapter.name!r} is an MLflow reference, which batch jobs do not resolve yet: "
                "give it a Hugging Face commit SHA or an S3 version folder",
            )
        elif source.s3_uri is not None and (
            not _S3_VERSION_FOLDER.fullmatch(str(source.revision))
            or str(source.revision).lower() in ("latest", "current", "main")
        ):
            yield ConfigIssue(
                key,
                f"adapter {adapter.name!r} is not pinned (S3 revision {source.revision!r}): give a version folder "
                "that is never rewritten",
            )


def check_batch_job_pool(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A batch job runs on a pool its tenant may use."""
    tenants = {t.name: t for t in config.tenants}
    for index, job in enumerate(config.batch_jobs):
        tenant = tenants.get(job.tenant)
        if tenant is not None and tenant.pools is not None and job.pool not in tenant.pools:
            yield ConfigIssue(
                ("batchJobs", index, "pool"),
                f"tenant {tenant.name!r} may only use pools {', '.join(tenant.pools)}, not {job.pool!r}",
            )


_COMMIT_SHA = re.compile(r"[0-9a-f]{40}")
_S3_VERSION_FOLDER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=-]{0,127}")


def check_batch_input_pinned(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A job's input is pinned: a dataset commit SHA, or an S3 version folder (never a moving
    name such as `latest`), so a resumed or retried shard reads the very lines it started on."""
    for index, job in enumerate(config.batch_jobs):
        source = job.input
        key = ("batchJobs", index, "input", "revision")
        if source.revision is None:
            yield ConfigIssue(key, "the input is not pinned: give the dataset's commit SHA or the S3 version folder")
        elif source.huggingface is not None and not _COMMIT_SHA.fullmatch(source.revision):
            yield ConfigIssue(
                key, f"{source.revision!r} is not pinned: give the 40-character commit SHA of the dataset repository"
            )
        elif source.s3_uri is not None and (
            not _S3_VERSION_FOLDER.fullmatch(source.revision) or source.revision.lower() in ("latest", "current", "main")
        ):
            yield ConfigIssue(
                key, f"{source.revision!r} is not pinned: give the input's version folder (one path segment, never 'latest')"
            )


def check_batch_parallelism_within_quota(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """GPUs per shard x parallelism fit the tenant's nominal batch quota on the job's pool: a
    job may borrow beyond it, but must be able to run on its own guarantee."""
    tenants = {t.name: (i, t) for i, t in enumerate(config.tenants)}
    for index, job in enumerate(config.batch_jobs):
        if job.tenant not in tenants:
            continue
        t_index, tenant = tenants[job.tenant]
        resource, per_shard = batch_gpu_request(job)
        need = per_shard * job.parallelism
        budget = tenant.batch_quota.get(job.pool)
        have = budget_resources(budget).get(resource, Decimal(0)) if budget is not None else Decimal(0)
        if need > have:
            yield ConfigIssue(
                ("batchJobs", index, "parallelism"),
                f"{job.parallelism} shards x {per_shard} {resource} = {need}, more than "
                f"{format_key(('tenants', t_index, 'batchQuota', job.pool, *_budget_key(resource)))} ({have}): "
                f"lower parallelism to {int(have) // per_shard if per_shard else 0} or raise the batch quota",
            )


def check_batch_deadline(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """The deadline covers at least one shard's estimate (shard_estimate_seconds)."""
    for index, job in enumerate(config.batch_jobs):
        estimate = shard_estimate_seconds(job)
        deadline = duration_seconds(job.deadline)
        if deadline < estimate:
            yield ConfigIssue(
                ("batchJobs", index, "deadline"),
                f"{job.deadline} is shorter than one shard's estimate: {min(job.shard_lines, job.lines)} lines x "
                f"{job.tokens_per_line} tokens / {job.tokens_per_second} tokens/s = {math.ceil(estimate)} s",
            )


CHECKS: list[Check] = [
    check_unique_names,
    check_gpu_sharing,
    check_tenants,
    check_capacity,
    check_model_references,
    check_release_versions,
    check_tenant_pools,
    check_models_fit_nodes,
    check_latency_sensitive_not_time_sliced,
    check_scale_to_zero_only_where_the_profile_allows,
    check_batch_labelling_kept_apart,
    check_time_sliced_memory_share,
    check_inference_graceful_drain,
    check_s3_weights_need_eks,
    check_registry_sources,
    check_serving_aliases_are_not_read,
    check_chat_templates,
    check_weights_cache_fits_the_node_disk,
    check_weight_mirror_needs_eks,
    check_streamed_weights_come_from_s3,
    check_cold_start_within_scale_up_budget,
    check_batch_models,
    check_registry_lock,
    check_gateway_headers,
    check_tenant_groups,
    check_tenant_s3_data,
    check_gateway_tls,
    check_object_names,
    check_server_component_names,
    check_tier_queues,
    check_adapter_names_unique,
    check_adapter_revisions,
    check_adapters_on_a_base_that_takes_them,
    check_adapter_ranks,
    check_adapters_resident,
    check_adapter_on_own_tenants_base,
    check_batch_model_adapters,
    check_adapter_canary_steps,
    check_adapter_sources,
    check_weights_fit_gpu_memory,
    check_adapter_memory,
    check_batch_quota_pools,
    check_batch_job_references,
    check_batch_job_pool,
    check_batch_job_adapter,
    check_batch_input_pinned,
    check_batch_parallelism_within_quota,
    check_batch_deadline,
]


def run_checks(config: PlatformConfig) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    for check in CHECKS:
        issues.extend(check(config))
    return issues


PeakCheck = Callable[[PlatformConfig, Mapping[str, Peak]], Iterable[ConfigIssue]]

# Checks of every model at its peak, which its serving backend sizes (rollout surge, injected
# containers): run by the plan (components/plan.py) once the config checks pass.
PEAK_CHECKS: list[PeakCheck] = [check_models_fit_quotas, check_models_fit_pools]


def run_peak_checks(config: PlatformConfig, peaks: Mapping[str, Peak]) -> list[ConfigIssue]:
    return [issue for check in PEAK_CHECKS for issue in check(config, peaks)]
