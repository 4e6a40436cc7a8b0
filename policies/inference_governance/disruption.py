"""Disruption and drain: inference pods leave the load balancers before SIGTERM and finish their requests within
the grace period, and a PodDisruptionBudget lets a drain evict one replica at a time."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any, Mapping

from .budgets import blocks_every_drain
from .kube import (
    FLOORS,
    HPA_V1,
    HPA_V2,
    KNATIVE_SERVICE,
    PDB,
    Report,
    config,
    get,
    gpu_resources,
    is_list,
    labels_match,
    name_of,
    namespace_of,
)
from .workloads import GpuWorkload, gpu_pod, gpu_workloads, knative_scale, of_type

DRAINED_WORKLOADS = ("kubernetes:apps/v1:Deployment", "kubernetes:apps/v1:StatefulSet")


def graceful_drain(args: Any, report_violation: Report) -> None:
    if args.resource_type not in DRAINED_WORKLOADS:
        return
    found = gpu_pod(args)
    if found is None:
        return
    spec, _ = found
    minimum = int(config(args).get("minTerminationGracePeriodSeconds", FLOORS["minTerminationGracePeriodSeconds"]))
    grace = get(spec, "terminationGracePeriodSeconds", default=30)
    if grace < minimum:
        report_violation(
            f"terminationGracePeriodSeconds is {grace}; inference pods need at least {minimum} s to finish in-flight requests"
        )
    least = int(config(args).get("minPreStopSeconds", FLOORS["minPreStopSeconds"]))
    for container in get(spec, "containers", default=[]):
        if not gpu_resources(container):
            continue
        name = get(container, "name", default="?")
        hook = get(container, "lifecycle", "preStop")
        if not hook:
            report_violation(f"container '{name}' has no preStop hook: it would get SIGTERM while still in the load balancers")
            continue
        pause = pre_stop_seconds(hook)
        if pause is not None and pause < least:
            report_violation(
                f"container '{name}' waits {pause:g} s in preStop; at least {least} s, for its endpoint to leave every load "
                "balancer before SIGTERM"
            )
        drain = flag_value(get(container, "args", default=[]), "--shutdown-timeout")
        if pause is not None and drain is not None and drain.isdigit() and pause + int(drain) > grace:
            report_violation(
                f"container '{name}': preStop {pause:g} s + vLLM --shutdown-timeout {drain} s exceed "
                f"terminationGracePeriodSeconds {grace}: the pod is killed before its requests finish"
            )


_SLEEP = re.compile(r"(?:^|[\s;&|(])sleep\s+(\d+(?:\.\d+)?)(?:s)?(?=$|[\s;&|)])")


def pre_stop_seconds(hook: Mapping[str, Any]) -> float | None:
    """How long a preStop hook holds the container before SIGTERM: a `sleep` action
    (lifecycle.preStop.sleep.seconds: LifecycleHandler.sleep in the Kubernetes 1.33 API schema) or an exec of
    `sleep N`; None when the hook does something else (an HTTP call, another command)."""
    if get(hook, "sleep") is not None:
        seconds = get(hook, "sleep", "seconds", default=0)
        return float(seconds) if isinstance(seconds, (int, float)) else None
    command = get(hook, "exec", "command", default=[])
    if not is_list(command) or not command:
        return None
    found = _SLEEP.search(" ".join(str(part) for part in command))
    return float(found.group(1)) if found else None


def flag_value(args: Any, flag: str) -> str | None:
    """The value given to a command-line flag, as `--flag value` or `--flag=value` (the last wins)."""
    value = None
    items = [str(a) for a in args] if is_list(args) else []
    for index, item in enumerate(items):
        if item == flag and index + 1 < len(items):
            value = items[index + 1]
        elif item.startswith(flag + "="):
            value = item.split("=", 1)[1]
    return value


def _replica_range(workload: GpuWorkload, scalers: dict[tuple[str, str], tuple[int, int]]) -> tuple[int, int]:
    """The fewest and the most replicas a workload runs (its autoscaler's bounds, else its
    replicas; a Knative service's min-scale and max-scale, 0 meaning unbounded)."""
    if workload.knative:
        return knative_scale(workload, "min-scale", 0), knative_scale(workload, "max-scale", 0) or 1000
    replicas = get(workload.resource.props, "spec", "replicas", default=1)
    low, high = scalers.get((workload.namespace, workload.name), (replicas, replicas))
    return low, max(replicas, high)


def pdb_for_replicated_inference(args: Any, report_violation: Report) -> None:
    budgets: dict[str, list[Any]] = defaultdict(list)
    for budget in of_type(args, PDB):
        budgets[namespace_of(budget.props)].append(budget)
    scalers = {
        (namespace_of(h.props), get(h.props, "spec", "scaleTargetRef", "name")): (
            get(h.props, "spec", "minReplicas", default=1),
            get(h.props, "spec", "maxReplicas", default=1),
        )
        for h in of_type(args, HPA_V2) + of_type(args, HPA_V1)
    }
    for workload in gpu_workloads(args):
        if workload.resource.resource_type not in (
            "kubernetes:apps/v1:Deployment",
            "kubernetes:apps/v1:StatefulSet",
            KNATIVE_SERVICE,
        ):
            continue
        fewest, most = _replica_range(workload, scalers)
        if most <= 1:
            continue
        covering = [
            b
            for b in budgets[workload.namespace]
            if labels_match(get(b.props, "spec", "selector", "matchLabels", default={}), workload.pod_labels)
        ]
        if not covering:
            report_violation(
                f"{workload.label} can run {most} replicas but no PodDisruptionBudget covers its pods: a node drain could "
                "take them all",
                workload.resource.urn,
            )
        for budget in covering:
            why = blocks_every_drain(get(budget.props, "spec", default={}), fewest)
            if why is not None:
                report_violation(
                    f"PodDisruptionBudget {workload.namespace}/{name_of(budget.props)} ({why}) lets no pod of {workload.label} "
                    "be evicted: every node drain and upgrade stalls; allow one (maxUnavailable 1)",
                    budget.urn,
                )
