"""The workloads whose pod templates the admission stage reads (WORKLOAD_KINDS), how many pods each runs, and the
namespaces they are admitted into (their labels, LimitRanges and ResourceQuotas)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable, Iterable

from components.backends.knative import rollout_surge as knative_rollout_surge
from platform_config.quantity import parse_quantity

# The extended resources a container may ask for (whole GPUs and MIG slices).
EXTENDED_PREFIXES = ("nvidia.com/",)
# What Kubernetes computes quota and scheduling over for a container.
COMPUTE = ("cpu", "memory", "ephemeral-storage")


@dataclass
class Workload:
    kind: str
    namespace: str
    name: str
    pod: dict[str, Any]
    labels: dict[str, str]
    annotations: dict[str, str]
    min_replicas: int
    max_replicas: int
    surge: int
    knative: bool = False
    # A DaemonSet: one pod on every node of its pool, whatever the others need.
    daemon: bool = False
    findings: list[str] = field(default_factory=list)
    # Containers after injection, defaulting and LimitRanger.
    containers: list[dict[str, Any]] = field(default_factory=list)
    init_containers: list[dict[str, Any]] = field(default_factory=list)
    pool: str | None = None
    # No node selector, no GPU, and no pool it tolerates is known: the cluster's scheduler places
    # it on nodes the program does not describe, so its placement is not checked.
    left_to_cluster_scheduler: bool = False
    peak: int = 0
    placed: int = 0

    @property
    def label(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    def pod_requests(self) -> dict[str, Decimal]:
        """The pod's effective requests: the larger of any init container and the sum of the
        app containers, per resource (as the scheduler and quota count them)."""
        return self._pod_total("requests")

    def pod_limits(self) -> dict[str, Decimal]:
        return self._pod_total("limits")

    def _pod_total(self, kind: str) -> dict[str, Decimal]:
        total: dict[str, Decimal] = {}
        for container in self.containers:
            for resource, amount in quantities(container, kind).items():
                total[resource] = total.get(resource, Decimal(0)) + amount
        for container in self.init_containers:
            for resource, amount in quantities(container, kind).items():
                total[resource] = max(total.get(resource, Decimal(0)), amount)
        return total


def quantities(container: dict[str, Any], kind: str) -> dict[str, Decimal]:
    return {k: parse_quantity(str(v)) for k, v in ((container.get("resources") or {}).get(kind) or {}).items()}


def by_kind(objects: Iterable[dict[str, Any]], kind: str, api_prefix: str = "") -> list[dict[str, Any]]:
    return [o for o in objects if o.get("kind") == kind and str(o.get("apiVersion", "")).startswith(api_prefix)]


def namespace_and_name(obj: dict[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or "default"), str(metadata.get("name"))


def _max_surge(deployment: dict[str, Any], replicas: int) -> int:
    """maxSurge as the Deployment controller resolves it (default 25 %, rounded up)."""
    strategy = (deployment.get("spec") or {}).get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0
    surge = (strategy.get("rollingUpdate") or {}).get("maxSurge", "25%")
    if isinstance(surge, str) and surge.endswith("%"):
        return math.ceil(replicas * int(surge[:-1]) / 100)
    return int(surge)


def _labels_annotations(template: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    metadata = template.get("metadata") or {}
    return dict(metadata.get("labels") or {}), dict(metadata.get("annotations") or {})


Hpas = dict[tuple[str, str], dict[str, Any]]


def _replicated(kind: str, obj: dict[str, Any], hpa: dict[str, Any] | None) -> Workload:
    """A Deployment or StatefulSet: its replicas, or its HPA's range; a Deployment's rollout surges."""
    namespace, name = namespace_and_name(obj)
    spec = obj.get("spec") or {}
    replicas = int(spec.get("replicas", 1))
    low = int(hpa.get("minReplicas", 1)) if hpa else replicas
    high = int(hpa["maxReplicas"]) if hpa else replicas
    surge = _max_surge(obj, high) if kind == "Deployment" else 0
    template = spec.get("template") or {}
    return Workload(kind, namespace, name, template.get("spec") or {}, *_labels_annotations(template), low, high, surge)


def _deployment(obj: dict[str, Any], hpas: Hpas) -> Workload:
    return _replicated("Deployment", obj, hpas.get(namespace_and_name(obj)))


def _stateful_set(obj: dict[str, Any], hpas: Hpas) -> Workload:
    return _replicated("StatefulSet", obj, None)


def _daemon_set(obj: dict[str, Any], hpas: Hpas) -> Workload:
    namespace, name = namespace_and_name(obj)
    template = (obj.get("spec") or {}).get("template") or {}
    return Workload(
        "DaemonSet", namespace, name, template.get("spec") or {}, *_labels_annotations(template), 0, 0, 0, daemon=True
    )


def _job(obj: dict[str, Any], hpas: Hpas) -> Workload:
    namespace, name = namespace_and_name(obj)
    spec = obj.get("spec") or {}
    parallel = int(spec.get("parallelism", 1))
    template = spec.get("template") or {}
    return Workload("Job", namespace, name, template.get("spec") or {}, *_labels_annotations(template), parallel, parallel, 0)


def _knative_service(obj: dict[str, Any], hpas: Hpas) -> Workload:
    namespace, name = namespace_and_name(obj)
    template = (obj.get("spec") or {}).get("template") or {}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    low = int(annotations.get("autoscaling.knative.dev/min-scale", 0))
    high = int(annotations.get("autoscaling.knative.dev/max-scale", 0))
    initial = annotations.get("autoscaling.knative.dev/initial-scale")
    surge = knative_rollout_surge(low, None if initial is None else int(initial))
    workload = Workload(
        "KnativeService",
        namespace,
        name,
        template.get("spec") or {},
        *_labels_annotations(template),
        low,
        high,
        surge,
        knative=True,
    )
    if high == 0:
        workload.findings.append("no autoscaling.knative.dev/max-scale: Knative may scale it without bound")
    return workload


# The kinds whose pod templates the stage reads, by (apiVersion prefix, kind), each with how its pods scale, in the
# order the report lists them. Every kind a serving backend (components/backends/) renders with a pod template is one
# of these, and each is one the pack reads too (kube.WORKLOAD_TYPES): tests/test_admission_stacks.py holds them
# together, and to the first-up stage's (preview/first_up.py) and the diff's (preview/diff.py ROLLING_KINDS) readers.
WORKLOAD_KINDS: dict[tuple[str, str], Callable[[dict[str, Any], Hpas], Workload]] = {
    ("apps/", "Deployment"): _deployment,
    ("apps/", "StatefulSet"): _stateful_set,
    ("apps/", "DaemonSet"): _daemon_set,
    ("batch/", "Job"): _job,
    ("serving.knative.dev/", "Service"): _knative_service,
}


def read_workloads(objects: list[dict[str, Any]]) -> list[Workload]:
    """Every workload of the kinds WORKLOAD_KINDS reads, with the replicas it runs at least and at most (a
    Deployment's by its HorizontalPodAutoscaler) and its rollout's surge."""
    hpas = {
        (namespace_and_name(h)[0], h["spec"]["scaleTargetRef"]["name"]): h["spec"]
        for h in by_kind(objects, "HorizontalPodAutoscaler")
        if (h.get("spec") or {}).get("scaleTargetRef", {}).get("kind") == "Deployment"
    }
    return [read(obj, hpas) for (prefix, kind), read in WORKLOAD_KINDS.items() for obj in by_kind(objects, kind, prefix)]


@dataclass(frozen=True)
class Namespace:
    labels: dict[str, str]
    limit_ranges: list[dict[str, Any]]
    quotas: list[dict[str, Any]]


def declared_namespaces(objects: list[dict[str, Any]]) -> dict[str, Namespace]:
    limit_ranges: dict[str, list[dict[str, Any]]] = {}
    quotas: dict[str, list[dict[str, Any]]] = {}
    for kind, into in (("LimitRange", limit_ranges), ("ResourceQuota", quotas)):
        for obj in by_kind(objects, kind):
            into.setdefault(namespace_and_name(obj)[0], []).append(obj)
    out: dict[str, Namespace] = {}
    for ns in by_kind(objects, "Namespace"):
        name = str(ns["metadata"]["name"])
        labels = dict(ns["metadata"].get("labels") or {})
        out[name] = Namespace(labels, limit_ranges.get(name, []), quotas.get(name, []))
    return out
