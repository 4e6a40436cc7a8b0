"""Stack outputs that show what the plan resolved, read from it rather than derived again from the config (pure: no
Pulumi imports)."""

from __future__ import annotations

from platform_config.serving import queue_seconds, route_timeout_seconds

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


def queue_bound_report(plan: Plan) -> list[dict[str, object]]:
    """Per model, tier and serving path: how long and how many of the tier's requests may wait for
    a server, who bounds it, and what a client past the bound gets (the program exports it as
    `queueBounds`; the preview's report shows it). A version with an endpoint picker queues in the
    picker, bounded in time by the tier's queue timeout (the picker's proxy times each tier);
    without one a request waits where the backend holds it (`queue_holder`) until the tier's
    route timeout. Every path is also bounded per gateway pod by
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
                per_replica = owner.backend.queued_requests_per_replica(plan.config, owner.model)
                row |= {
                    "path": owner.backend.queue_holder,
                    "boundSeconds": None,
                    "boundRequests": per_replica,
                    "boundRequestsPer": "replica" if per_replica is not None else None,
                    "enforcedBy": f"nothing in time: the route timeout ({timeout} s)",
                    "answer": f"503 with Retry-After {retry_after} s when the queue is full, else 504 after {timeout} s"
                    if per_replica is not None
                    else f"504 after {timeout} s",
                }
            row["gatewayPendingPerPod"] = tier.policy.max_pending_requests
            rows.append(row)
    return rows
