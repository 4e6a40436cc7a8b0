"""The resolved plan: the validated config, resolved once into what every component reads.

`resolve` turns a `PlatformConfig` (validated by `platform_config.load_config`) into an
immutable `Plan`: per model its backend, its servers (per running version: pool, tenant, GPU
resource, replica bounds, tiers, timeouts and drain chain, vLLM arguments, object names) and its
peak demand. The checks that need the backends' facts (rollout surge, injected containers,
their own rules) run here and fail the same way as the config checks (`ConfigError`: one line
per key, no traceback). Components receive their slice of the plan; nothing recomputes a
derived value.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

from platform_config.checks import run_peak_checks
from platform_config.errors import ConfigIssue
from platform_config.models import (
    ModelConfig,
    ModelVersion,
    PlatformConfig,
    ServerArgs,
)
from platform_config.pins import VLLM
from platform_config.serving import (
    GPU_MEMORY_UTILIZATION_DEFAULT,
    MESH_PROXY_RESOURCES,
    Peak,
    drain_chain,
    effective_profile,
    model_peak,
    model_priority_class,
    model_tiers,
    replica_bounds,
    replica_gpu_request,
    running_versions,
    schedules_by_priority,
    served_tiers,
    server_name,
    time_sliced_memory_share,
    weights_service_account,
)

from .backends import BACKENDS
from .serving import TIER_ORDER, ModelPlan, Plan, RoutePlan, ServerPlan, ServingBackend, TierRoute


def merged_server_args(model: ModelConfig, version: ModelVersion) -> ServerArgs:
    """The model's vLLM settings with the version's own settings on top."""
    base = model.server.model_dump(exclude_defaults=True)
    base.update(version.server.model_dump(exclude_defaults=True))
    return ServerArgs.model_validate(base)


def backend_of(model: ModelConfig) -> ServingBackend:
    return BACKENDS[model.autoscaling.mode]


def _server(
    config: PlatformConfig, model: ModelConfig, version_name: str, *, hugging_face_tenants: Collection[str]
) -> ServerPlan:
    version = next(v for v in model.versions if v.name == version_name)
    pool = next(p for p in config.node_pools if p.name == model.pool)
    backend = backend_of(model)
    profile = effective_profile(config, model)
    args = merged_server_args(model, version)
    resource, count = replica_gpu_request(model)
    low, high = replica_bounds(model)
    if args.gpu_memory_utilization is not None:
        memory_fraction = args.gpu_memory_utilization
    elif pool.sharing.mode == "timeSlicing" and pool.sharing.replicas:
        # Shares of a time-sliced GPU split its memory: each server plans for its part only.
        memory_fraction = time_sliced_memory_share(GPU_MEMORY_UTILIZATION_DEFAULT, pool.sharing.replicas)
    else:
        memory_fraction = GPU_MEMORY_UTILIZATION_DEFAULT
    cap = backend.request_cap(config, model)
    return ServerPlan(
        model=model,
        version=version,
        backend=backend,
        profile=profile,
        pool=pool,
        name=server_name(model, version_name),
        namespace=model.tenant,
        tiers=served_tiers(config, model),
        by_priority=schedules_by_priority(config, model),
        priority_class=model_priority_class(model),
        args=args,
        image=version.image or VLLM.image,
        gpu_resource=resource,
        gpu_count=count,
        gpu_memory_utilization=memory_fraction,
        min_replicas=low,
        max_replicas=high,
        drain=drain_chain(config, model),
        max_num_seqs=args.max_num_seqs if args.max_num_seqs is not None else cap or profile.concurrency_per_replica,
        # Only the tenant's own token, and only where the weights come from Hugging Face.
        hugging_face_token=model.tenant in hugging_face_tenants and version.source.huggingface is not None,
        aliases=tuple(m.openai_name for m in config.models if m.batch_model == model.name),
        weights_service_account=weights_service_account(model) if version.source.s3_uri else None,
    )


def _route(config: PlatformConfig, model: ModelConfig) -> RoutePlan:
    by_name = {m.name: m for m in config.models}
    own = set(model_tiers(config, model))
    wanted = own | ({"batch"} if model.batch_model is not None else set())
    tiers = []
    for tier in TIER_ORDER:
        if tier not in wanted:
            continue
        owner = by_name[model.batch_model] if tier == "batch" and model.batch_model is not None else model
        tiers.append(
            TierRoute(
                tier, config.traffic.tiers[tier], owner, backend_of(owner), by_priority=schedules_by_priority(config, owner)
            )
        )
    subsets = tuple((tier, config.traffic.tiers[tier]) for tier in served_tiers(config, model))
    return RoutePlan(
        model=model,
        backend=backend_of(model),
        versions=tuple(running_versions(model)),
        traffic=config.traffic,
        tiers=tuple(tiers),
        subsets=subsets,
    )


def _peak(model: ModelConfig) -> Peak:
    backend = backend_of(model)
    return model_peak(model, backend.rollout_surge(model), (MESH_PROXY_RESOURCES, *backend.injected_containers()))


def _backend_issues(config: PlatformConfig) -> Iterator[ConfigIssue]:
    pools = {p.name: p for p in config.node_pools}
    for index, model in enumerate(config.models):
        if model.pool not in pools:
            continue  # reported by the config checks
        backend = backend_of(model)
        if model.autoscaling.min_replicas == 0 and not backend.scales_to_zero:
            can = ", ".join(b.mode for b in BACKENDS.values() if b.scales_to_zero)
            yield ConfigIssue(
                ("models", index, "autoscaling", "minReplicas"),
                f"mode {backend.mode!r} cannot scale to zero: minReplicas must be at least 1 (modes that can: {can})",
            )
        yield from backend.config_issues(config, index, model, pools[model.pool])


def plan_checks(config: PlatformConfig) -> list[ConfigIssue]:
    """The checks that need the serving backends: each backend's own rules, and every model at
    its peak against its tenant's budget and its pool. `load_config` runs them with the config's
    own checks (`load_config(extra_checks=[plan_checks])`), so every problem shows at once."""
    peaks = {m.name: _peak(m) for m in config.models}
    return [*_backend_issues(config), *run_peak_checks(config, peaks)]


def resolve(config: PlatformConfig, *, hugging_face_tenants: Collection[str]) -> Plan:
    """The plan of a config that passed every check, `plan_checks` included;
    `hugging_face_tenants`: the tenants that have a Hugging Face token."""
    models = []
    for model in config.models:
        servers = tuple(_server(config, model, v, hugging_face_tenants=hugging_face_tenants) for v in running_versions(model))
        s3_uris = tuple(sorted({s.version.source.s3_uri for s in servers if s.version.source.s3_uri}))
        models.append(
            ModelPlan(
                model=model,
                backend=backend_of(model),
                servers=servers,
                s3_uris=s3_uris,
                weights_service_account=weights_service_account(model) if s3_uris else None,
                peak=_peak(model),
                route=_route(config, model),
            )
        )
    return Plan(config=config, models=tuple(models))
