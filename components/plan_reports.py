"""Stack outputs that show what the plan resolved, read from it rather than derived again from the config (pure: no
Pulumi imports)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from platform_config.capacity import MIG_SLICE, WHOLE_GPU, PoolSupply
from platform_config.gpu_catalog import COMPUTE_SLICES, INSTANCE_TYPES, MIG_RESOURCE_PREFIX
from platform_config.memory_fit import rank_memory, vllm_max_num_batched_tokens, weights_bytes
from platform_config.models import NodePoolConfig
from platform_config.prices import PRICE_LIST, NodePrice, Unpriced
from platform_config.serving import ServerAdmission, latency_target_ms, queue_seconds, route_timeout_seconds, workload_peak

from .serving import Plan


def cold_start_report(plan: Plan) -> list[dict[str, object]]:
    """Per model: its expected cold start on its pool, the arithmetic, what follows from it (the startup probe's
    budget, the rollout's progress deadline) and whether it keeps to the scale-up budget (the program exports it as
    `coldStarts`; the preview's report shows it). Every running version of a model starts alike (the same pool,
    weights size and image size): the stable version's server speaks for it."""
    rows: list[dict[str, object]] = []
    for model_plan in plan.models:
        server = model_plan.servers[0]
        start = server.cold_start
        assert start is not None, f"{server.name}: the plan derived no cold start"
        rows.append(
            {
                "model": model_plan.model.name,
                "pool": start.pool,
                "medium": start.medium,
                "downloadGbps": start.download_gbps,
                "imageSeconds": start.image_seconds,
                "weightsSeconds": start.weights_seconds,
                "engineSeconds": start.engine_seconds,
                "totalSeconds": start.total_seconds,
                # When no node of the pool has room: the node's expected join first.
                "onNewNodeSeconds": start.on_new_node_seconds,
                "arithmetic": start.arithmetic(),
                "startupProbeSeconds": server.startup_budget_seconds,
                "progressDeadlineSeconds": server.progress_deadline_seconds,
                "latencySensitive": server.profile.latency_sensitive,
                "minReplicas": server.min_replicas,
                "scaleUpBudgetSeconds": plan.scale_up_budget_seconds,
            }
        )
    return rows


def _admission_row(path: str, admissions: list[ServerAdmission], timeout: int) -> dict[str, object]:
    """A path no endpoint picker times: each replica's vLLM bounds its queue (ServerAdmission) in requests and, given
    a measured prefill rate, in prompt tokens still to prefill; a request it admits may still wait for a running
    request to finish, which nothing times (no `boundSeconds`)."""
    measured = bool(admissions) and all(a.max_prefill_tokens is not None for a in admissions)
    prefill = f", or {admissions[0].bound_seconds} s of prompts to prefill (--max-num-queued-tokens)" if measured else ""
    return {
        "path": path,
        "boundSeconds": None,
        "prefillBacklogSeconds": admissions[0].bound_seconds if measured else None,
        "boundRequests": max(a.waiting for a in admissions) if admissions else None,
        "boundRequestsPer": "replica" if admissions else None,
        "enforcedBy": f"each replica's vLLM: its waiting requests (--max-num-queued-reqs){prefill}; nothing times a wait "
        f"for a running request to finish but the route timeout ({timeout} s)",
    }


def queue_bound_report(plan: Plan) -> list[dict[str, object]]:
    """Per model, tier and serving path: how long and how many of the tier's requests may wait for
    a server, who bounds it, and what a client past the bound gets (the program exports it as
    `queueBounds`; the preview's report shows it). A version with an endpoint picker queues in the
    picker, bounded in time by the tier's queue timeout (the picker's proxy times each tier);
    without one each replica's vLLM admits it only within its bounds (ten waiting requests per
    running one and, given a measured prefill rate, the shortest served tier's queue timeout of
    prompts to prefill), else 503 at once; a request it admits is not timed. Every path is also
    bounded per gateway pod by
    the tier's pending requests (Envoy's circuit breaker: 503 at once)."""
    by_name = {model_plan.model.name: model_plan for model_plan in plan.models}
    rows: list[dict[str, object]] = []
    for model_plan in plan.models:
        for tier in model_plan.route.tiers:
            owner = by_name[tier.owner.name]
            retry_after = queue_seconds(tier.policy)
            timeout = route_timeout_seconds(tier.policy)
            picker = next((s.endpoint_picker for s in owner.servers if s.endpoint_picker is not None), None)
            row: dict[str, object] = {"model": model_plan.model.openai_name, "tier": tier.tier, "servedBy": owner.model.name}
            if picker is not None:
                band = next(b for b in picker.bands if b.tier == tier.tier)
                row |= {
                    "path": "endpoint picker",
                    "boundSeconds": band.queue_seconds,
                    "boundRequests": band.max_requests,
                    "boundRequestsPer": "picker",
                    "enforcedBy": "the version's endpoint picker proxy (the tier's queue timeout) and picker (band size)",
                    "answer": f"503, Retry-After {retry_after} s",
                }
            else:
                row |= _admission_row(owner.backend.queue_holder, [s.admission for s in owner.servers if s.admission], timeout)
                answer = f"503 with Retry-After {retry_after} s at once when the queue is full, else 504 after {timeout} s"
                if owner.backend.scales_to_zero and min(s.min_replicas for s in owner.servers) == 0:
                    # No replica ready: the activator holds the request, untimed (components/backends/knative.py).
                    answer += f"; from zero replicas it waits for one, 504 after {timeout} s"
                row["answer"] = answer
            row["gatewayPendingPerPod"] = tier.policy.max_pending_requests
            rows.append(row)
    return rows


# --- cost -------------------------------------------------------------------------------------


def _pool_supplies(plan: Plan) -> dict[str, PoolSupply]:
    """What one node of each pool advertises, by pool name, as the plan's pool slices hold it (resolved once)."""
    return {name: pool.capacity.supply for name, pool in plan.pools.items()}


def _node_share(supply: PoolSupply, resource: str, count: int) -> Decimal:
    """The share of one of the pool's nodes a pod asking for `count` of `resource` is charged: the share of the node's
    GPUs its units are, each a whole GPU, a time-sliced share (1 / replicas of one), or a MIG slice (its compute
    slices of the GPU's seven, as NVIDIA names it: 3g = 3/7)."""
    kind = supply.kinds.get(resource, WHOLE_GPU)
    if kind == MIG_SLICE:
        profile = resource.removeprefix(MIG_RESOURCE_PREFIX)
        per_unit = Decimal(supply.instance.gpu.mig_profiles[profile].compute_slices) / COMPUTE_SLICES
    elif kind == WHOLE_GPU:
        per_unit = Decimal(1)
    else:
        per_unit = Decimal(supply.instance.gpus) / supply.per_node[resource]
    return per_unit * count / supply.instance.gpus


def _nodes_for(supply: PoolSupply, pods: dict[tuple[str, int], int]) -> int:
    """The nodes of the pool these pods fill, by (GPU resource, count per pod): a node offers each resource its
    geometry gives it, whole pods only; resources of one node are shared by the pods of all of them, so the pool
    needs the most any one resource needs."""
    needed: dict[str, int] = {}
    for (resource, count), replicas in pods.items():
        fits = supply.per_node.get(resource, 0) // count if count else 0
        if replicas and fits:
            needed[resource] = needed.get(resource, 0) + math.ceil(replicas / fits)
    return max(needed.values(), default=0)


CENT = Decimal("0.01")
# The cost report's key for what no tenant holds: none has it (tenant names are DNS labels).
_UNALLOCATED = ""
# The platform's own part, the system node group, which no tenant is charged: no tenant has the key (a DNS label
# starts with a letter or digit).
_PLATFORM = "-platform"
SYSTEM_NODE_GROUP = "system node group"


def _money(value: Decimal) -> str:
    return str(value.quantize(CENT))


def apportioned(total: Decimal, parts: dict[str, Decimal]) -> dict[str, Decimal]:
    """`parts` (each >= 0, adding up to `total`) in whole cents that add up to `total` in cents exactly: each
    rounded down, and the cents left over given to the largest remainders (rounding each alone could show
    tenants more than the environment, and a negative rest)."""
    cents = {key: (value / CENT).to_integral_value(rounding="ROUND_FLOOR") for key, value in parts.items()}
    left = int((total / CENT).quantize(Decimal(1)) - sum(cents.values()))
    by_remainder = sorted(parts, key=lambda key: (parts[key] / CENT - cents[key], key), reverse=True)
    for key in by_remainder[: max(left, 0)]:
        cents[key] += 1
    return {key: value * CENT for key, value in cents.items()}


def _price_fields(price: NodePrice | Unpriced) -> dict[str, object]:
    if isinstance(price, Unpriced):
        return {"pricePerHour": None, "priceSource": None, "priceNote": price.reason}
    # As stated (the list's 4.6016 is not 4.60), without an exponent.
    per_hour = format(price.per_hour.normalize(), "f")
    return {"pricePerHour": per_hour, "priceSource": price.source, "priceNote": price.caveat}


def cost_report(plan: Plan) -> dict[str, object]:
    """What the stack's nodes cost per hour (USD) at minimum and at maximum scale, at each pool's price as the plan
    resolved it (its `pricePerHour`, else the dated AWS list price, platform_config/prices.py): the environment's
    nodes (each GPU pool at least at its minSize and the nodes its pods' minimum replicas fill, at most its maxSize;
    the system node group at its minSize and maxSize), and each tenant's share, charged by the GPUs its pods hold (a
    model version's replicas at its minimum and maximum, a batch job's `parallelism` shards at maximum unless it is
    paused), and where those ask for more of a pool than its nodes (they cannot all run at once), each its part of
    the nodes there are. The system node group is the platform's part (controllers, gateway, pickers); what no tenant holds
    (idle GPU capacity, rounding up to whole nodes) is `unallocated`, so the tenants, the platform and it add up to
    the environment. A pool without a price is listed with the reason."""
    config = plan.config
    pools = {pool.name: pool for pool in config.node_pools}
    supplies = _pool_supplies(plan)
    held, min_pods = _held_nodes(plan, pools, supplies)
    pool_rows, environment, tenants = _gpu_pool_costs(plan, pools, supplies, held, min_pods)
    system_row, platform = _system_node_group_cost(plan)
    if system_row is not None:
        pool_rows.append(system_row)
        if isinstance(plan.system_node_price, NodePrice):
            for k in environment:
                environment[k] += platform[k]
    # In cents that add up to the environment exactly as shown, the platform and what no tenant holds included.
    shown = {}
    for k in ("min", "max"):
        parts = {t: v[k] for t, v in tenants.items()}
        rest = environment[k] - platform[k] - sum(parts.values())
        shown[k] = apportioned(environment[k], {**parts, _PLATFORM: platform[k], _UNALLOCATED: rest})
    tenant_rows = [{"tenant": t, "minPerHour": _money(shown["min"][t]), "maxPerHour": _money(shown["max"][t])} for t in tenants]
    listed = any(row["priceSource"] == "list" for row in pool_rows)
    return {
        "currency": PRICE_LIST.currency,
        "environment": {"minPerHour": _money(environment["min"]), "maxPerHour": _money(environment["max"])},
        "tenants": tenant_rows,
        "platform": {k + "PerHour": _money(shown[k][_PLATFORM]) for k in ("min", "max")},
        "unallocated": {k + "PerHour": _money(shown[k][_UNALLOCATED]) for k in ("min", "max")},
        "pools": pool_rows,
        "priceList": PRICE_LIST.describe() if listed else None,
        "unpriced": [{"pool": row["pool"], "reason": row["priceNote"]} for row in pool_rows if row["pricePerHour"] is None],
    }


# At minimum and at maximum scale ("min", "max").
_Scale = dict[str, Decimal]


def _held_nodes(
    plan: Plan, pools: Mapping[str, NodePoolConfig], supplies: Mapping[str, PoolSupply]
) -> tuple[dict[str, dict[str, _Scale]], dict[str, dict[tuple[str, int], int]]]:
    """What each tenant's pods hold per pool (in nodes), at minimum and at maximum scale: a model version's replicas
    at its minimum and maximum, a batch job's `parallelism` shards at maximum unless it is paused. And the pods at
    minimum scale per pool, by the GPU resource and count each asks for."""
    held: dict[str, dict[str, _Scale]] = {
        name: {t.name: {"min": Decimal(0), "max": Decimal(0)} for t in plan.config.tenants} for name in pools
    }
    min_pods: dict[str, dict[tuple[str, int], int]] = {name: {} for name in pools}
    for model in plan.models:
        for server in model.servers:
            share = _node_share(supplies[server.pool.name], server.gpu_resource, server.gpu_count)
            asks = (server.gpu_resource, server.gpu_count)
            min_pods[server.pool.name][asks] = min_pods[server.pool.name].get(asks, 0) + server.min_replicas
            held[server.pool.name][server.namespace]["min"] += share * server.min_replicas
            held[server.pool.name][server.namespace]["max"] += share * server.max_replicas
    for job in plan.batch_jobs:
        # A paused job holds nothing until it is resumed (its LocalQueue stops it, specs/kueue.py).
        if not job.job.paused:
            shards = min(job.job.parallelism, job.shards)
            held[job.pool.name][job.namespace]["max"] += (
                _node_share(supplies[job.pool.name], job.gpu_resource, job.gpu_count) * shards
            )
    return held, min_pods


def _gpu_pool_costs(
    plan: Plan,
    pools: Mapping[str, NodePoolConfig],
    supplies: Mapping[str, PoolSupply],
    held: Mapping[str, Mapping[str, _Scale]],
    min_pods: Mapping[str, dict[tuple[str, int], int]],
) -> tuple[list[dict[str, Any]], _Scale, dict[str, _Scale]]:
    """Each GPU pool's row (at least its minSize and the nodes its pods' minimum replicas fill, at most its maxSize),
    and what the priced pools cost per hour: the environment, and each tenant by what its pods hold there."""
    prices = plan.node_prices_per_hour()
    tenants: dict[str, _Scale] = {t.name: {"min": Decimal(0), "max": Decimal(0)} for t in plan.config.tenants}
    environment = {"min": Decimal(0), "max": Decimal(0)}
    pool_rows = []
    for name, pool in pools.items():
        nodes = {"min": max(pool.min_size, _nodes_for(supplies[name], min_pods[name])), "max": pool.max_size}
        pool_rows.append(
            {"pool": name, "instanceType": pool.instance_type, **_price_fields(plan.node_prices[name]), "nodes": nodes}
        )
        price = prices.get(name)
        if price is None:
            continue
        for k in environment:
            environment[k] += nodes[k] * price
            # More than the pool's nodes hold cannot run at once (the servers' maxReplicas and the batch shards
            # together): each tenant is charged its part of the nodes there are, so nothing is counted twice.
            asked = sum(h[k] for h in held[name].values())
            scale = min(Decimal(1), nodes[k] / asked) if asked else Decimal(1)
            for tenant, h in held[name].items():
                tenants[tenant][k] += h[k] * scale * price
    return pool_rows, environment, tenants


def _system_node_group_cost(plan: Plan) -> tuple[dict[str, Any] | None, _Scale]:
    """The system node group's row (None without one, or where the plan has no price entry for it) and what it
    costs per hour at its minSize and maxSize: the platform's part (zero while unpriced)."""
    platform = {"min": Decimal(0), "max": Decimal(0)}
    eks = plan.config.cluster.eks
    if eks is None or plan.system_node_price is None:
        return None, platform
    group = eks.system_node_group
    nodes = {"min": group.min_size, "max": group.max_size}
    row = {
        "pool": SYSTEM_NODE_GROUP,
        "instanceType": group.instance_type,
        **_price_fields(plan.system_node_price),
        "nodes": nodes,
    }
    if isinstance(plan.system_node_price, NodePrice):
        for k in platform:
            platform[k] = nodes[k] * plan.system_node_price.per_hour
    return row, platform


# --- serving performance -----------------------------------------------------------------


# On each server's vLLM workload (its metadata, so no pod rolls): the digest of the servingShapes row the preview's
# Serving performance stage judged; the pack's serving-performance policy finds the stage's verdict by it.
SERVING_SHAPE_ANNOTATION = "inference.platform/serving-shape"


# What a verdict does not depend on: the price only sets the cost per token the report shows, so a new price is not
# a new shape (and updates no workload).
_NOT_JUDGED = ("shape", "replicaPerHour")


def shape_digest(row: dict[str, object]) -> str:
    """A servingShapes row's digest: a change to anything the stage passes or fails a server by (its model, device,
    vLLM limits, replicas, load, latency target, the keys it names) is a new shape, to be judged again."""
    fields = {key: value for key, value in row.items() if key not in _NOT_JUDGED}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:20]


def serving_shape_digests(shapes: dict[str, object]) -> dict[str, str]:
    """By server name, the digest of its row in `shapes` (serving_shapes)."""
    rows = shapes["servers"]
    assert isinstance(rows, list)
    return {row["name"]: row["shape"] for row in rows}


def serving_shapes(plan: Plan) -> dict[str, object]:
    """What the preview's Serving performance stage predicts each server from (preview/performance.py), one row per
    running version: the model's architecture, the device one rank runs on (platform_config/memory_fit.py), vLLM's
    limits, the replica bounds, the load it is judged at and its latency target, and what a replica costs per hour
    (its share of a node at the pool's price as the plan resolved it: `pricePerHour`, else the list price); and
    whether the stack is production, where a server that cannot meet its latency target or peak fails the stage. Each
    row's `shape` is its digest without the price (shape_digest). The program exports it as `servingShapes`."""
    config = plan.config
    supplies = _pool_supplies(plan)
    prices = plan.node_prices_per_hour()
    rows: list[dict[str, object]] = []
    for index, model in enumerate(config.models):
        model_plan = next((m for m in plan.models if m.model.name == model.name), None)
        if model_plan is None:
            continue
        for server in model_plan.servers:
            gpu = INSTANCE_TYPES[server.pool.instance_type].gpu
            memory = rank_memory(gpu, server.pool, model, server.args)
            peak = workload_peak(config, model)
            price = prices.get(server.pool.name)
            architecture = server.version.architecture or model.architecture
            version_index = next(i for i, v in enumerate(model.versions) if v.name == server.version.name)

            def server_key(setting: str, field: str) -> str:
                """Where the stack sets a vLLM setting for this version: its own `server`, else the model's."""
                if getattr(server.version.server, field) is not None:
                    return f"models[{index}].versions[{version_index}].server.{setting}"
                return f"models[{index}].server.{setting}"

            rows.append(
                {
                    "name": server.name,
                    "key": f"models[{index}]",
                    "keys": {
                        "maxModelLen": server_key("maxModelLen", "max_model_len"),
                        "maxNumSeqs": server_key("maxNumSeqs", "max_num_seqs"),
                    },
                    "model": model.name,
                    "version": server.version.name,
                    "tenant": server.namespace,
                    "pool": server.pool.name,
                    "profile": model.profile,
                    "runner": server.profile.runner,
                    "architecture": None
                    if architecture is None
                    else {"performanceModel": architecture.performance_model, "config": architecture.hf_config()},
                    "gpu": gpu.name,
                    "system": gpu.performance_system,
                    "device": {
                        "kind": memory.kind,
                        "migProfile": memory.mig_profile,
                        "sharedBy": memory.shared_by,
                        "capacityBytes": memory.capacity_bytes,
                    },
                    "tensorParallel": memory.ranks,
                    "memoryFraction": memory.fraction,
                    "weightsBytes": weights_bytes(model),
                    "maxModelLen": server.args.max_model_len,
                    "maxNumSeqs": server.max_num_seqs,
                    "maxNumBatchedTokens": vllm_max_num_batched_tokens(gpu, memory, server.args),
                    "replicas": {"min": server.min_replicas, "max": server.max_replicas},
                    "peak": {
                        "requestsPerSecond": peak.requests_per_second,
                        "promptTokens": peak.prompt_tokens,
                        "outputTokens": peak.output_tokens,
                    },
                    "latencyTargetMs": latency_target_ms(config, model),
                    "latencySli": server.profile.latency_sli,
                    "replicaPerHour": None
                    if price is None
                    else str(
                        (_node_share(supplies[server.pool.name], server.gpu_resource, server.gpu_count) * price).quantize(
                            Decimal("0.0001")
                        )
                    ),
                }
            )
    for row in rows:
        row["shape"] = shape_digest(row)
    return {"production": config.environment == "production", "servers": rows}
