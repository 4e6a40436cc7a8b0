"""Stack outputs that show what the plan resolved, read from it rather than derived again from the config (pure: no
Pulumi imports)."""

from __future__ import annotations

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
