"""ResourceQuota (pkg/quota/v1/evaluator/core/pods.go): a pod in scope of a quota that limits a compute resource must
state it, and every workload in scope at its peak must fit the quota."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Sequence

from platform_config.quantity import parse_quantity, show_rounded

from ..selectors import requirement_holds
from .workloads import COMPUTE, Namespace, Workload, namespace_and_name


def _in_scope(quota: dict[str, Any], workload: Workload) -> bool:
    selector = (quota.get("spec") or {}).get("scopeSelector") or {}
    klass = workload.pod.get("priorityClassName", "")
    for expression in selector.get("matchExpressions") or []:
        if expression.get("scopeName") != "PriorityClass":
            continue
        # A pod's priority class is present when it names one; an operator it does not know is ignored here.
        holds = requirement_holds(str(expression.get("operator")), bool(klass), klass, set(expression.get("values") or []))
        if holds is False:
            return False
    return True


def _quota_requirements(workload: Workload, quota: dict[str, Any]) -> None:
    """Quota'd compute resources every container must state (enforcePodContainerConstraints)."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    name = namespace_and_name(quota)[1]
    for key in hard:
        kind, _, resource = key.partition(".")
        if kind not in ("requests", "limits") or resource not in COMPUTE:
            if key in COMPUTE:  # a bare `cpu`/`memory` quota means requests
                kind, resource = "requests", key
            else:
                continue
        for container in workload.containers + workload.init_containers:
            if resource not in ((container.get("resources") or {}).get(kind) or {}):
                workload.findings.append(
                    f"ResourceQuota {name}: container {container.get('name')} must specify {kind}.{resource}"
                )


def set_peaks(all_workloads: list[Workload], server_peaks: Sequence[dict[str, Any]]) -> None:
    """Each workload's pods at peak: what the plan exports for model servers, else the
    workload's own maximum plus its rollout surge."""
    planned = {(p["namespace"], p["name"]): int(p["peakPods"]) for p in server_peaks}
    for workload in all_workloads:
        workload.peak = planned.get((workload.namespace, workload.name), workload.max_replicas + workload.surge)


def quota_usage(all_workloads: list[Workload], namespaces: dict[str, Namespace]) -> list[str]:
    findings = []
    for ns_name, namespace in sorted(namespaces.items()):
        for quota in namespace.quotas:
            scoped = [w for w in all_workloads if w.namespace == ns_name and _in_scope(quota, w)]
            for w in scoped:
                _quota_requirements(w, quota)
            # Each pod's totals once per quota, not once per key it limits.
            totals = {"requests": [w.pod_requests() for w in scoped], "limits": [w.pod_limits() for w in scoped]}
            hard = (quota.get("spec") or {}).get("hard") or {}
            for key, text in sorted(hard.items()):
                if key == "pods":
                    used = Decimal(sum(w.peak for w in scoped))
                    resource = "pods"
                else:
                    kind, _, resource = key.partition(".")
                    if kind not in ("requests", "limits"):
                        kind, resource = "requests", key
                    used = sum(
                        (pod.get(resource, Decimal(0)) * w.peak for w, pod in zip(scoped, totals[kind], strict=True)),
                        Decimal(0),
                    )
                allowed = parse_quantity(str(text))
                if used > allowed:
                    who = ", ".join(f"{w.name} x{w.peak}" for w in scoped)
                    findings.append(
                        f"ResourceQuota {ns_name}/{namespace_and_name(quota)[1]}: {key} at peak is "
                        f"{show_rounded(resource, used)} "
                        f"but the quota allows {show_rounded(resource, allowed)} ({who})"
                    )
    return findings
