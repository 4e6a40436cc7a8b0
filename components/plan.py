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

from collections.abc import Iterator
from dataclasses import dataclass

from platform_config.checks import run_peak_checks
from platform_config.errors import ConfigIssue
from platform_config.models import (
    ModelConfig,
    ModelVersion,
    NodePoolConfig,
    PlatformConfig,
    ServerArgs,
    TierPolicy,
    TrafficConfig,
)
from platform_config.pins import VLLM
from platform_config.profiles import TierName, WorkloadProfile
from platform_config.serving import (
    GPU_MEMORY_UTILIZATION_DEFAULT,
    MESH_PROXY_RESOURCES,
    DrainChain,
    Peak,
    drain_chain,
    effective_profile,
    model_peak,
    model_priority_class,
    model_tiers,
    replica_bounds,
    replica_gpu_request,
    running_versions,
    server_name,
    time_sliced_memory_share,
    weights_service_account,
)

from .backends import BACKENDS, ServingBackend
from .constants import (
    GPU_RESOURCE,
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_LATENCY_SENSITIVE,
    LABEL_MODEL,
    LABEL_MODEL_VERSION,
    LABEL_NAME,
    LABEL_PART_OF,
    LABEL_PROFILE,
    LABEL_TENANT,
    LABEL_VERSION,
    PART_OF,
)


def merged_server_args(model: ModelConfig, version: ModelVersion) -> ServerArgs:
    """The model's vLLM settings with the version's own settings on top."""
    base = model.server.model_dump(exclude_defaults=True)
    base.update(version.server.model_dump(exclude_defaults=True))
    return ServerArgs.model_validate(base)


@dataclass(frozen=True)
class ServerPlan:
    """One running version of one model: everything its server's objects are built from."""

    model: ModelConfig
    version: ModelVersion
    backend: ServingBackend
    profile: WorkloadProfile
    pool: NodePoolConfig
    name: str
    namespace: str
    tiers: tuple[TierName, ...]
    priority_class: str
    args: ServerArgs
    image: str
    gpu_resource: str
    gpu_count: int
    gpu_memory_utilization: float
    min_replicas: int
    max_replicas: int
    # Route and request timeouts, preStop, vLLM's drain and the grace period, derived together.
    drain: DrainChain
    # Sequences vLLM runs at once: the stack's, else the backend's hard cap, else the profile's.
    max_num_seqs: int
    hugging_face_token: bool
    # Served names of models whose batch tier this server takes (vLLM answers to them too).
    aliases: tuple[str, ...]
    # Service account with read access to the S3 weights (workload identity), if any.
    weights_service_account: str | None

    @property
    def tensor_parallel_size(self) -> int:
        return self.gpu_count if self.gpu_resource == GPU_RESOURCE and not self.time_sliced else 1

    @property
    def time_sliced(self) -> bool:
        return self.pool.sharing.mode == "timeSlicing"

    @property
    def labels(self) -> dict[str, str]:
        return {
            LABEL_NAME: self.model.name,
            LABEL_INSTANCE: self.name,
            LABEL_VERSION: self.version.name,
            LABEL_COMPONENT: "model-server",
            LABEL_PART_OF: PART_OF,
            LABEL_MODEL: self.model.name,
            LABEL_MODEL_VERSION: self.version.name,
            LABEL_TENANT: self.namespace,
            LABEL_PROFILE: self.profile.name,
            LABEL_LATENCY_SENSITIVE: str(self.profile.latency_sensitive).lower(),
            # Istio's conventional labels: telemetry and subsets read them.
            "app": self.model.name,
            "version": self.version.name,
        }

    @property
    def selector(self) -> dict[str, str]:
        return {LABEL_INSTANCE: self.name}


# Tiers in the order routes and subsets list them.
TIER_ORDER: tuple[TierName, ...] = ("premium", "standard", "batch")


@dataclass(frozen=True)
class TierRoute:
    """One tier requests for a model may use."""

    tier: TierName
    policy: TierPolicy
    # The model whose servers take it: the model itself, or the model its batch tier is sent to.
    owner: ModelConfig
    # Whether that server schedules by the priority the gateway writes (it serves several tiers).
    by_priority: bool


@dataclass(frozen=True)
class RoutePlan:
    """What a model's routes and subsets are built from."""

    model: ModelConfig
    traffic: TrafficConfig
    # Tiers requests for the model may use (its own, plus batch when sent to a batch model).
    tiers: tuple[TierRoute, ...]
    # Tiers the model's own servers take, for itself or as another model's batch model: its
    # subsets.
    subsets: tuple[tuple[TierName, TierPolicy], ...]


@dataclass(frozen=True)
class ModelPlan:
    model: ModelConfig
    backend: ServingBackend
    servers: tuple[ServerPlan, ...]
    # S3 prefixes its versions read, and the service account whose role reads them.
    s3_uris: tuple[str, ...]
    weights_service_account: str | None
    peak: Peak
    route: RoutePlan


@dataclass(frozen=True)
class Plan:
    config: PlatformConfig
    models: tuple[ModelPlan, ...]

    @property
    def routes(self) -> tuple[RoutePlan, ...]:
        return tuple(m.route for m in self.models)

    def model(self, name: str) -> ModelPlan:
        return next(m for m in self.models if m.model.name == name)

    def backends(self) -> tuple[ServingBackend, ...]:
        """The backends the stack's models use, in registry order."""
        used = {m.backend.mode for m in self.models}
        return tuple(b for mode, b in BACKENDS.items() if mode in used)


def backend_of(model: ModelConfig) -> ServingBackend:
    return BACKENDS[model.autoscaling.mode]


def _server(config: PlatformConfig, model: ModelConfig, version_name: str, *, hugging_face_token: bool) -> ServerPlan:
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
        tiers=model_tiers(config, model),
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
        hugging_face_token=hugging_face_token and version.source.huggingface is not None,
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
        tiers.append(TierRoute(tier, config.traffic.tiers[tier], owner, by_priority=len(model_tiers(config, owner)) > 1))
    batch_for_others = any(m.batch_model == model.name for m in config.models)
    subsets = tuple(
        (tier, config.traffic.tiers[tier])
        for tier in TIER_ORDER
        if (tier in own and not (tier == "batch" and model.batch_model is not None)) or (tier == "batch" and batch_for_others)
    )
    return RoutePlan(model=model, traffic=config.traffic, tiers=tuple(tiers), subsets=subsets)


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


def resolve(config: PlatformConfig, *, hugging_face_token: bool) -> Plan:
    """The plan of a config that passed every check, `plan_checks` included."""
    models = []
    for model in config.models:
        servers = tuple(_server(config, model, v, hugging_face_token=hugging_face_token) for v in running_versions(model))
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
