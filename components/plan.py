# Long module: the resolution of every slice of the plan (servers, routes, pickers, batch jobs, pools), one function each.
"""The resolved plan: the validated config, resolved once into what every component reads.

`resolve` turns a `PlatformConfig` (validated by `platform_config.load_config`) into an
immutable `Plan`: per model its backend, its servers (per running version: pool, tenant, GPU
resource, replica bounds, tiers, timeouts and drain chain, vLLM arguments, object names) and its
peak demand; per tenant its budgets (platform_config/tenant_plan.py) and per pool what its nodes
offer and carry (`PoolPlan`), computed by the same functions the config checks call. The checks
that need the backends' facts (rollout surge, injected containers, their own rules) run here and
fail the same way as the config checks (`ConfigError`: one line per key, no traceback).
Components receive their slice of the plan; nothing recomputes a derived value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Iterator, Mapping
from decimal import Decimal

from platform_config.adapters import LoraLimits, adapter_modules, batch_job_adapter, batch_lora_limits, lora_limits
from platform_config.batch_jobs import batch_gpu_request, batch_shards
from platform_config.capacity import batch_queue_rows
from platform_config.chart_images import chart_image_values
from platform_config.chat_templates import served_template
from platform_config.checks import run_peak_checks
from platform_config.cold_start import (
    cold_start,
    max_node_provision_seconds,
    model_volume_size,
    progress_deadline,
    scale_up_budget_seconds,
    startup_budget_seconds,
)
from platform_config.errors import ConfigIssue
from platform_config.image_lock import ImageLock
from platform_config.memory_fit import gpu_memory_fraction
from platform_config.models import (
    BatchInput,
    BatchJobConfig,
    ModelConfig,
    ModelSource,
    PlatformConfig,
)
from platform_config.pins import AWS_CLI, ENDPOINT_PICKER, ENVOY_PROXY, VLLM
from platform_config.pool_plan import PoolCapacity, pool_capacities
from platform_config.prices import node_price
from platform_config.quantity import parse_quantity, show_amount
from platform_config.registry import RegistryResolution
from platform_config.s3_locations import s3_parts
from platform_config.serving import (
    MESH_PROXY_RESOURCES,
    Peak,
    drain_chain,
    effective_profile,
    merged_server_args,
    model_peak,
    model_priority_class,
    model_tiers,
    picker_priority,
    queue_seconds,
    replica_bounds,
    replica_gpu_request,
    running_versions,
    schedules_by_priority,
    served_tiers,
    server_admission,
    server_name,
    weights_service_account,
)
from platform_config.tenant_plan import tenant_plans
from platform_config.weight_mirror import hugging_face_revision, mirror_copy, mirror_job_name, mirrored_revisions

from .backends import BACKENDS
from .constants import LABEL_INSTANCE, LABEL_TENANT, SYSTEM_NODE_SELECTOR, standard_labels
from .picker_plan import EndpointPickerPlan, PickerBand
from .pool_plan import PoolPlan
from .serving import Plan, TenantEgress
from .shapes import TIER_ORDER, BatchJobPlan, ModelPlan, RoutePlan, ServerPlan, ServingBackend, TierRoute
from .slo_plan import SloPlan
from .specs.endpoint_picker.names import epp_name_of
from .specs.endpoint_picker.plan_rules import EPP_POD_RESOURCES
from .specs.gpu_sharing import node_labels, node_taint
from .specs.slo_rules import latency_slo
from .system_nodes import stack_system_template


def backend_of(model: ModelConfig) -> ServingBackend:
    return BACKENDS[model.autoscaling.mode]


def _server(
    config: PlatformConfig,
    model: ModelConfig,
    version_name: str,
    *,
    hugging_face_tenants: Collection[str],
    registry: RegistryResolution | None,
    node_provision_seconds: int,
    image_lock: ImageLock,
) -> ServerPlan:
    configured = next(v for v in model.versions if v.name == version_name)
    # The loader replaced every registry reference by the pinned source it names (platform_config/registry.py).
    assert configured.source.mlflow is None, f"{model.name}/{version_name}: an unresolved MLflow registry source reached the plan"
    # With a weight mirror, a Hugging Face version is served from its copy in S3: from here on the server sees an S3
    # source (its args, its role, its token), and `mirrored_from` says what it copies; its adapters' modules likewise.
    copy = mirror_copy(config, model.tenant, configured.source)
    version = configured if copy is None else configured.model_copy(update={"source": copy})
    lora = _with_copies(config, model.tenant, lora_limits(config, model))
    pool = next(p for p in config.node_pools if p.name == model.pool)
    backend = backend_of(model)
    profile = effective_profile(config, model)
    args = merged_server_args(model, version)
    resource, count = replica_gpu_request(model)
    low, high = replica_bounds(model)
    memory_fraction = gpu_memory_fraction(pool, args)
    cap = backend.request_cap(config, model)
    running = args.max_num_seqs if args.max_num_seqs is not None else cap or profile.concurrency_per_replica
    start = cold_start(config, model)
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
        image=image_lock.pinned(version.image or VLLM.image),
        aws_cli_image=image_lock.pinned(AWS_CLI.image),
        gpu_resource=resource,
        gpu_count=count,
        gpu_memory_utilization=memory_fraction,
        min_replicas=low,
        max_replicas=high,
        drain=drain_chain(config, model),
        max_num_seqs=running,
        # Where no endpoint picker times the queue, the servers bound their own.
        admission=None
        if backend.uses_endpoint_picker(model)
        else server_admission(config, model, running, args.prefill_tokens_per_second),
        # Only the tenant's own token, and only where the weights (or an adapter's) come from Hugging Face itself.
        hugging_face_token=model.tenant in hugging_face_tenants
        and (version.source.huggingface is not None or _downloads_adapters(lora)),
        aliases=tuple(m.openai_name for m in config.batch_senders.get(model.name, ())),
        weights_service_account=weights_service_account(model)
        if version.source.s3_uri or _adapter_s3_uris(config, model)
        else None,
        endpoint_picker=endpoint_picker_plan(config, model, version_name, image_lock),
        registry_entry=registry.entry(model.name, version_name) if registry is not None else None,
        chat_template=served_template(version.chat_template),
        cold_start=start,
        startup_budget_seconds=startup_budget_seconds(start),
        progress_deadline_seconds=progress_deadline(start, node_provision_seconds),
        evictable_local_volumes=pool.weight_cache.allow_scale_down,
        lora=lora,
        model_volume_size=model_volume_size(config, model),
        mirrored_from=configured.source if copy is not None else None,
        mirror_jobs=_mirror_jobs(model.tenant, [configured.source if copy is not None else None, *_copied(lora)]),
    )


def _with_copies(config: PlatformConfig, tenant: str, lora: LoraLimits | None) -> LoraLimits | None:
    """The LoRA modules a pod of `tenant`'s loads, each Hugging Face one with the weight mirror's copy it fetches
    instead, where the stack has a mirror (`AdapterModule.copy`)."""
    if lora is None:
        return None
    modules = tuple(dataclasses.replace(m, copy=mirror_copy(config, tenant, m.source)) for m in lora.modules)
    return dataclasses.replace(lora, modules=modules)


def _downloads_adapters(lora: LoraLimits | None) -> bool:
    """Whether a pod fetches a LoRA module from Hugging Face itself (one the mirror does not copy)."""
    return lora is not None and any(m.fetched_from.huggingface is not None for m in lora.modules)


def _copied(lora: LoraLimits | None) -> list[ModelSource]:
    """The Hugging Face sources of the LoRA modules a pod reads from the weight mirror's copies."""
    return [m.source for m in (lora.modules if lora is not None else ()) if m.copy is not None]


def _mirror_jobs(tenant: str, sources: Iterable[ModelSource | None]) -> tuple[str, ...]:
    """The weight mirror's Jobs that copy these Hugging Face sources for `tenant` (None: read from its own source),
    once each, in order: what a pod reading the copies waits for."""
    return tuple(dict.fromkeys(mirror_job_name(tenant, *hugging_face_revision(s)) for s in sources if s is not None))


def _adapter_s3_uris(config: PlatformConfig, model: ModelConfig) -> set[str]:
    """The S3 prefixes the model's servers fetch their adapter modules from (their own, or the weight mirror's
    copies): their workload role reads them too."""
    lora = _with_copies(config, model.tenant, lora_limits(config, model))
    return {uri for m in (lora.modules if lora is not None else ()) if (uri := m.fetched_from.s3_uri) is not None}


def endpoint_picker_plan(
    config: PlatformConfig, model: ModelConfig, version_name: str, image_lock: ImageLock = ImageLock()
) -> EndpointPickerPlan | None:
    """The endpoint picker in front of one version's servers, None where the backend has none: what the
    servers' plan holds, for readers outside a preview (the canary verdict reads its flow-control counts)."""
    return _endpoint_picker(config, model, server_name(model, version_name), image_lock)


def _endpoint_picker(config: PlatformConfig, model: ModelConfig, name: str, image_lock: ImageLock) -> EndpointPickerPlan | None:
    """The endpoint picker of one version's servers: a band per tier they take, each with its bound."""
    backend = backend_of(model)
    if not backend.uses_endpoint_picker(model):
        return None
    drain = drain_chain(config, model)
    server_host, target_port = backend.picker_target(model, name)
    bands = []
    for tier in served_tiers(config, model):
        policy = config.traffic.tiers[tier]
        bands.append(
            PickerBand(
                tier,
                picker_priority(tier, policy),
                policy.max_queued_requests,
                policy.max_queued_bytes,
                queue_seconds=queue_seconds(policy),
            )
        )
    return EndpointPickerPlan(
        name=name,
        namespace=model.tenant,
        server_labels={LABEL_INSTANCE: name},
        target_port=target_port,
        replicas=model.endpoint_picker.replicas,
        bands=tuple(bands),
        request_timeout_seconds=drain.request_timeout_seconds,
        # Not the model label: the model's Service selects its servers by it.
        labels=standard_labels(f"{name}-epp", "endpoint-picker", **{LABEL_TENANT: model.tenant}),
        node_selector=dict(SYSTEM_NODE_SELECTOR) if config.cluster.eks is not None else {},
        server_host=server_host,
        lora_affinity=bool(adapter_modules(config, model)),
        image=image_lock.pinned(ENDPOINT_PICKER.image),
        proxy_image=image_lock.pinned(ENVOY_PROXY.image),
    )


def _route(config: PlatformConfig, model: ModelConfig) -> RoutePlan:
    by_name = config.models_by_name
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
    peak = model_peak(model, backend.rollout_surge(model), (MESH_PROXY_RESOURCES, *backend.injected_containers()))
    if not backend.uses_endpoint_picker(model):
        return peak
    # Each running version's pickers, in the tenant's namespace and so in its quota; quotas
    # bound requests.cpu/memory and limits.memory, so the larger of a container's memory request
    # and limit is what counts. A rollout (maxSurge 1) replaces each old pod once a new one is ready, and a replaced pod
    # counts against the quota until its grace period ends (pkg/quota/v1/evaluator/core/pods.go
    # QuotaV1Pod), which the Envoy's drain makes minutes: at worst every old pod still
    # terminating beside every new one.
    replicas = model.endpoint_picker.replicas
    pods = len(running_versions(model)) * max(replicas + 1, 2 * replicas)
    per_pod = picker_pod_resources("limits.memory")
    return dataclasses.replace(peak, picker_pods=pods, picker_demand={r: amount * pods for r, amount in per_pod.items()})


def endpoint_pickers_by_tenant(config: PlatformConfig) -> dict[str, dict[str, Decimal]]:
    """What each tenant's endpoint pickers hold at peak (quota terms: CPU requests, memory
    limits, pods), for the capacity report."""
    held: dict[str, dict[str, Decimal]] = {}
    for model in config.models:
        peak = _peak(model)
        if not peak.picker_pods:
            continue
        tenant = held.setdefault(model.tenant, {})
        for resource, amount in [*peak.picker_demand.items(), ("pods", Decimal(peak.picker_pods))]:
            tenant[resource] = tenant.get(resource, Decimal(0)) + amount
    return held


def picker_pod_resources(memory: str) -> dict[str, Decimal]:
    """One endpoint picker pod's CPU requests and memory (`requests.memory`: what the scheduler
    places; `limits.memory`: what quotas count, the larger), its mesh sidecar included
    (requests = limits, MESH_PROXY_RESOURCES)."""
    return {
        "cpu": sum((parse_quantity(c["requests.cpu"]) for c in EPP_POD_RESOURCES.values()), Decimal(0))
        + parse_quantity(MESH_PROXY_RESOURCES["cpu"]),
        "memory": sum((parse_quantity(c[memory]) for c in EPP_POD_RESOURCES.values()), Decimal(0))
        + parse_quantity(MESH_PROXY_RESOURCES["memory"]),
    }


def _picker_placement_issues(config: PlatformConfig, peaks: Mapping[str, Peak]) -> Iterator[ConfigIssue]:
    """Every endpoint picker pod at peak fits the EKS system node group at maxSize, beside the
    platform's controllers (the preview's admission stage bin-packs the same template)."""
    eks, template = config.cluster.eks, stack_system_template(config)
    pods = sum(peak.picker_pods for peak in peaks.values())
    if eks is None or template is None or not pods:
        return
    group = eks.system_node_group
    node = {r: parse_quantity(str(v)) for r, v in template["allocatable"].items()}
    need = picker_pod_resources("requests.memory")
    per_node = min(int(node.get(r, Decimal(0)) // amount) for r, amount in need.items())
    if per_node * group.max_size < pods:
        yield ConfigIssue(
            ("cluster", "eks", "systemNodeGroup"),
            f"the endpoint pickers run {pods} pods at peak (per running version its replicas and, during a rollout, as "
            f"many draining), each requesting {show_amount('cpu', need['cpu'])} CPU and "
            f"{show_amount('memory', need['memory'])} of memory; "
            f"{group.instance_type} system nodes hold {per_node} each beside the platform's controllers, "
            f"{per_node * group.max_size} at maxSize {group.max_size}: raise maxSize or choose a larger instanceType",
        )


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


def _slo(config: PlatformConfig, model: ModelConfig) -> SloPlan:
    """The model's objectives: its profile's, where its own `slo` does not say otherwise."""
    profile = effective_profile(config, model)
    own = model.slo
    target = own.latency_target_ms if own.latency_target_ms is not None else profile.ttft_target_ms
    return SloPlan(
        model=model.name,
        served_name=model.openai_name,
        tenant=model.tenant,
        availability_objective=(
            own.availability_objective if own.availability_objective is not None else profile.availability_objective
        ),
        latency=latency_slo(
            profile.latency_sli,
            target,
            own.latency_objective if own.latency_objective is not None else profile.latency_objective,
        ),
        picker_workloads=tuple(
            epp_name_of(server_name(model, version))
            for version in running_versions(model)
            if backend_of(model).uses_endpoint_picker(model)
        ),
    )


def plan_checks(config: PlatformConfig) -> list[ConfigIssue]:
    """The checks that need the serving backends: each backend's own rules, and every model at
    its peak against its tenant's budget and its pool. `load_config` runs them with the config's
    own checks (`load_config(extra_checks=[plan_checks])`), so every problem shows at once."""
    peaks = {m.name: _peak(m) for m in config.models}
    return [*_backend_issues(config), *run_peak_checks(config, peaks), *_picker_placement_issues(config, peaks)]


def resolve(
    config: PlatformConfig,
    *,
    hugging_face_tenants: Collection[str],
    registry: RegistryResolution | None = None,
    region: str | None = None,
    image_lock: ImageLock = ImageLock(),
) -> Plan:
    """The plan of a config that passed every check, `plan_checks` included;
        `hugging_face_tenants`: the tenants that have a Hugging Face token; `registry`: what the stack's MLflow registry
        references resolved to (the config already holds the sources they name); `region`: the AWS region the nodes run
        in (`LoadedConfig.region`), which the list prices are read for; `image_lock`: the digests every image is pulled by
    (`LoadedConfig.image_lock`)."""
    node_provision_seconds = max_node_provision_seconds(config)
    models = []
    for model in config.models:
        servers = tuple(
            _server(
                config,
                model,
                v,
                hugging_face_tenants=hugging_face_tenants,
                registry=registry,
                node_provision_seconds=node_provision_seconds,
                image_lock=image_lock,
            )
            for v in running_versions(model)
        )
        s3_uris = tuple(
            sorted({s.version.source.s3_uri for s in servers if s.version.source.s3_uri} | _adapter_s3_uris(config, model))
        )
        models.append(
            ModelPlan(
                model=model,
                backend=backend_of(model),
                servers=servers,
                s3_uris=s3_uris,
                weights_service_account=weights_service_account(model) if s3_uris else None,
                peak=_peak(model),
                route=_route(config, model),
                slo=_slo(config, model),
            )
        )
    batch_jobs = tuple(_batch_job(config, job, hugging_face_tenants, image_lock) for job in config.batch_jobs)
    return Plan(
        config=config,
        models=tuple(models),
        scale_up_budget_seconds=scale_up_budget_seconds(config),
        max_node_provision_seconds=node_provision_seconds,
        endpoint_pickers_by_tenant=endpoint_pickers_by_tenant(config),
        batch_jobs=batch_jobs,
        batch_queues=tuple(batch_queue_rows(config)),
        mirrored_revisions=tuple(
            dataclasses.replace(revision, image=image_lock.pinned(revision.image)) for revision in mirrored_revisions(config)
        ),
        egress=tenant_egress(config, models, batch_jobs),
        tenants=tenant_plans(config),
        pools={name: _pool(capacity) for name, capacity in pool_capacities(config).items()},
        node_prices={
            pool.name: node_price(pool.instance_type, pool.capacity_type, pool.price_per_hour, region)
            for pool in config.node_pools
        },
        system_node_price=None
        if config.cluster.eks is None
        else node_price(
            config.cluster.eks.system_node_group.instance_type,
            "ON_DEMAND",
            config.cluster.eks.system_node_group.price_per_hour,
            region,
        ),
        chart_image_values=chart_image_values(config.cluster.kubernetes_version, image_lock.digests),
    )


def _pool(capacity: PoolCapacity) -> PoolPlan:
    """A pool's plan: what its nodes offer, and the labels and taint they carry."""
    return PoolPlan(capacity, labels=node_labels(capacity), taint=node_taint())


def tenant_egress(
    config: PlatformConfig, models: Iterable[ModelPlan], batch_jobs: Iterable[BatchJobPlan]
) -> dict[str, TenantEgress]:
    """Each tenant's TenantEgress, from the sources its models' running versions and adapters read, and
    what its batch jobs read and write."""
    by_tenant: dict[str, list[ModelPlan]] = {tenant.name: [] for tenant in config.tenants}
    for plan in models:
        by_tenant[plan.model.tenant].append(plan)
    jobs_by_tenant: dict[str, list[BatchJobPlan]] = {tenant.name: [] for tenant in config.tenants}
    for job in batch_jobs:
        jobs_by_tenant[job.namespace].append(job)

    def job_sources(job: BatchJobPlan) -> list[ModelSource | BatchInput]:
        return [job.model_source, job.job.input, *(m.fetched_from for m in (job.lora.modules if job.lora else ()))]

    egress: dict[str, TenantEgress] = {}
    for tenant, plans in by_tenant.items():
        jobs = jobs_by_tenant[tenant]
        sources = [source for job in jobs for source in job_sources(job)]
        uris = [uri for plan in plans for uri in plan.s3_uris]
        uris += [source.s3_uri for source in sources if source.s3_uri is not None] + [job.job.output for job in jobs]
        egress[tenant] = TenantEgress(
            buckets=tuple(sorted({s3_parts(uri)[0] for uri in uris})),
            # Where its pods download from Hugging Face themselves: never in production (the weight mirror copies what
            # they read; platform_config/checks/weights.py check_production_reads_hugging_face_from_the_mirror).
            hugging_face=any(s.reads_hugging_face for plan in plans for s in plan.servers)
            or any(job.reads_hugging_face for job in jobs),
            batch_jobs=bool(jobs),
        )
    return egress


def _batch_job(
    config: PlatformConfig, job: BatchJobConfig, hugging_face_tenants: Collection[str], image_lock: ImageLock
) -> BatchJobPlan:
    resource, count = batch_gpu_request(job)
    # With a weight mirror, its pods copy its Hugging Face model and adapter from the mirror's copies in S3.
    copy = mirror_copy(config, job.tenant, job.model.source)
    found = batch_job_adapter(config, job)
    lora = _with_copies(config, job.tenant, batch_lora_limits(*found) if found is not None else None)
    plan = BatchJobPlan(
        job=job,
        pool=next(p for p in config.node_pools if p.name == job.pool),
        gpu_resource=resource,
        gpu_count=count,
        shards=batch_shards(job),
        image=image_lock.pinned(VLLM.image),
        aws_cli_image=image_lock.pinned(AWS_CLI.image),
        hugging_face_token=False,
        service_account=f"batch-{job.name}",
        lora=lora,
        weights_copy=copy,
        mirror_jobs=_mirror_jobs(job.tenant, [job.model.source if copy is not None else None, *_copied(lora)]),
    )
    # Only the tenant's own token, and only where the job downloads from Hugging Face itself.
    return dataclasses.replace(plan, hugging_face_token=job.tenant in hugging_face_tenants and plan.reads_hugging_face)
