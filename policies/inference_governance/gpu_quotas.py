"""GPU quotas and priorities: every GPU workload bounded by a quota that applies to its PriorityClass, and the
tenants' quotas within what the pools provide."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping

from .kube import (
    MIG_PREFIX,
    MIG_PROFILES,
    PRIORITY_CLASS,
    PRODUCTION_PRIORITY_CLASS,
    QUOTA,
    Report,
    config,
    get,
    is_gpu_resource,
    name_of,
    namespace_of,
)
from .workloads import gpu_workloads, of_type, pools


def gpu_quota_and_priority(args: Any, report_violation: Report) -> None:
    settings = config(args)
    quotas: dict[str, list[Any]] = defaultdict(list)
    for quota in of_type(args, QUOTA):
        quotas[namespace_of(quota.props)].append(get(quota.props, "spec", default={}))
    classes = {name_of(c.props): c.props for c in of_type(args, PRIORITY_CLASS)}
    existing = set(classes) | set(settings.get("externalPriorityClasses", []))
    for workload in gpu_workloads(args):
        priority = get(workload.spec, "priorityClassName")
        covered = {
            key.removeprefix("requests.")
            for spec in quotas.get(workload.namespace, [])
            if quota_applies(spec, workload.spec)
            for key in get(spec, "hard", default={})
            if key.startswith("requests.")
        }
        missing = sorted(r for r in workload.gpu_resources if r not in covered)
        if missing:
            report_violation(
                f"namespace {workload.namespace} runs GPU workload {workload.name} (PriorityClass {priority or 'none'}) but no "
                f"ResourceQuota that applies to its pods bounds {', '.join('requests.' + r for r in missing)}",
                workload.resource.urn,
            )
        if not priority:
            report_violation(
                f"{workload.namespace}/{workload.name} uses a GPU but names no priorityClassName", workload.resource.urn
            )
        elif priority not in existing:
            report_violation(
                f"{workload.namespace}/{workload.name} names PriorityClass '{priority}', which the stack does not define",
                workload.resource.urn,
            )
    production = settings.get("productionPriorityClass", PRODUCTION_PRIORITY_CLASS)
    if production in classes:
        top = get(classes[production], "value", default=0)
        for name, props in classes.items():
            if get(props, "value", default=0) < top and get(props, "preemptionPolicy", default="PreemptLowerPriority") != "Never":
                report_violation(f"PriorityClass '{name}' ranks below '{production}' but may preempt: set preemptionPolicy Never")
            if get(props, "globalDefault") is True:
                report_violation(f"PriorityClass '{name}' is the global default: GPU workloads must choose their class")


def quota_applies(quota: Mapping[str, Any], pod_spec: Mapping[str, Any]) -> bool:
    """Whether a ResourceQuota counts a pod, by its scopes and scope selector (every one must
    match) (kubernetes pkg/quota/v1/evaluator/core/pods.go: podMatchesScopeFunc and
    podMatchesSelector; a pod with no PriorityClass has no value to match In against)."""
    priority = get(pod_spec, "priorityClassName", default="")
    terminating = get(pod_spec, "activeDeadlineSeconds") is not None
    requirements = [{"scopeName": scope, "operator": "Exists"} for scope in get(quota, "scopes", default=[])]
    requirements += list(get(quota, "scopeSelector", "matchExpressions", default=[]))
    for requirement in requirements:
        scope, operator = get(requirement, "scopeName"), get(requirement, "operator")
        values = set(get(requirement, "values", default=[]))
        if scope == "PriorityClass":
            matched = {
                "In": bool(priority) and priority in values,
                "NotIn": not priority or priority not in values,
                "Exists": bool(priority),
                "DoesNotExist": not priority,
            }.get(operator, False)
        else:
            # A GPU server asks for resources (not BestEffort), runs without a deadline unless it says so,
            # and uses no cross-namespace pod affinity.
            matched = {"Terminating": terminating, "NotTerminating": not terminating, "NotBestEffort": True}.get(scope, False)
        if not matched:
            return False
    return True


def _overcommit(args: Any) -> float:
    # The pack's owners allow overcommit, not the stack being governed.
    return float(config(args).get("overcommitRatio", 1.0))


def _quantity(value: Any) -> float:
    try:
        return float(str(value))
    except ValueError:
        return 0.0


def stack_capacity(args: Any, report_violation: Report) -> None:
    known = {name: pool for name, pool in pools(args).items() if get(pool, "advertisedPerNode")}
    if not known:
        return  # no pool components: nothing to weigh quotas against
    supply: dict[str, float] = defaultdict(float)
    for name, pool in known.items():
        gpu_model = get(pool, "gpuModel")
        for resource, count in get(pool, "advertisedPerNode", default={}).items():
            supply[resource] += float(count) * float(get(pool, "maxSize", default=0))
            if resource.startswith(MIG_PREFIX):
                profile = resource.removeprefix(MIG_PREFIX)
                if profile not in MIG_PROFILES.get(gpu_model, set()):
                    report_violation(f"pool '{name}' advertises MIG profile {profile}, which {gpu_model} GPUs do not offer")
    demand: dict[str, float] = defaultdict(float)
    holders: dict[str, list[str]] = defaultdict(list)
    for quota in of_type(args, QUOTA):
        spec = get(quota.props, "spec", default={})
        if get(spec, "scopeSelector") or get(spec, "scopes"):
            continue  # scoped quotas are shares of the namespace's unscoped total
        for key, value in get(spec, "hard", default={}).items():
            resource = key.removeprefix("requests.")
            if key.startswith("requests.") and is_gpu_resource(resource) and _quantity(value) > 0:
                demand[resource] += _quantity(value)
                holders[resource].append(f"{namespace_of(quota.props)} {value}")
    ratio = _overcommit(args)
    for resource, amount in sorted(demand.items()):
        if amount > supply.get(resource, 0.0) * ratio:
            report_violation(
                f"quotas on {resource} add up to {amount:g} ({', '.join(holders[resource])}) but the pools provide "
                f"{supply.get(resource, 0.0):g} at max size" + (f" x overcommit {ratio:g}" if ratio != 1 else "")
            )
    for workload in gpu_workloads(args):
        for resource in sorted(workload.gpu_resources):
            if supply.get(resource, 0.0) <= 0:
                report_violation(
                    f"{workload.namespace}/{workload.name} asks for {resource}, which no GPU pool provides", workload.resource.urn
                )
