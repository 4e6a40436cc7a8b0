"""Stack validators: rules that relate resources to each other."""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections import defaultdict
from typing import Any, Collection, Iterator, Mapping

from .kube import (
    AUTHORIZATION_POLICY,
    BATCH_JOB,
    COMPONENT_LABEL,
    CRON_JOB,
    DEFAULT_OVERRIDE_HEADER,
    DEFAULT_TIER_HEADER,
    DEPLOYMENT,
    DESTINATION_RULE,
    ENDPOINT_PICKER,
    FACTS,
    FLOORS,
    GATEWAY_LISTENER_PORTS,
    GATEWAY_NAMESPACE,
    GATEWAY_SELECTOR,
    GPU_NODE_POOL,
    GPU_SHARING_LABEL,
    HELM_RELEASE,
    HPA_V1,
    HPA_V2,
    INFERENCE_POOL,
    INJECT_ASKED,
    ISTIO_GATEWAY,
    ISTIO_SIDECAR,
    KNATIVE_SERVICE,
    LATENCY_LABEL,
    LOCAL_QUEUE,
    MIG_PREFIX,
    MIG_PROFILES,
    MODEL_LABEL,
    NAMESPACE,
    OVERRIDE_HEADER_ANNOTATION,
    PDB,
    PEER_AUTHENTICATION,
    POD_MONITOR,
    POOL_LABEL,
    PRIORITY_CLASS,
    PRODUCTION_PRIORITY_CLASS,
    QUEUE_NAME_LABEL,
    QUOTA,
    REQUEST_AUTHENTICATION,
    SERVICE,
    SERVICE_ENTRY,
    SERVICE_MONITOR,
    SIDECAR_INJECT,
    SIDECAR_NAME,
    TENANT_LABEL,
    VIRTUAL_SERVICE,
    Report,
    config,
    containers,
    fqdn,
    get,
    image_repository,
    is_gpu_resource,
    is_list,
    is_production,
    is_sidecar_stub,
    labels_match,
    model_servers,
    name_of,
    namespace_of,
    opts_out_of_injection_or_host_network,
    placement_pools,
    pod_gpu_resources,
    pod_labels,
    pod_template,
    selector_matches,
    whole_number,
)

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"


def of_type(args: Any, token: str) -> list[Any]:
    return [r for r in args.resources if r.resource_type == token]


def _tenant_namespaces(args: Any) -> set[str]:
    """The tenants' namespaces: those the program labels with their tenant."""
    return {name_of(n.props) for n in of_type(args, NAMESPACE) if get(n.props, "metadata", "labels", TENANT_LABEL)}


class GpuWorkload:
    def __init__(self, resource: Any):
        template = pod_template(resource.resource_type, resource.props)
        self.resource = resource
        self.spec = get(template, "spec", default={})
        self.labels = dict(get(template, "metadata", "labels", default={}))
        self.namespace = namespace_of(resource.props)
        self.name = name_of(resource.props)
        self.gpu_resources = pod_gpu_resources(self.spec)
        self.knative = resource.resource_type == KNATIVE_SERVICE
        self.pools = placement_pools(self.spec)
        self.pod_labels = pod_labels(resource.resource_type, resource.props)

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}"


def gpu_workloads(args: Any) -> list[GpuWorkload]:
    out = []
    for resource in args.resources:
        if pod_template(resource.resource_type, resource.props) is None:
            continue
        workload = GpuWorkload(resource)
        if workload.gpu_resources:
            out.append(workload)
    return out


def pools(args: Any) -> dict[str, dict[str, Any]]:
    """What the stack says about its GPU pools: the pool components' outputs, with the EKS node
    groups' labels and capacity type where the pools are EKS node groups."""
    found: dict[str, dict[str, Any]] = {}
    for component in of_type(args, GPU_NODE_POOL):
        props = component.props
        if get(props, "pool"):
            found[props["pool"]] = dict(props)
    for group in of_type(args, NODE_GROUP):
        labels = get(group.props, "labels", default={})
        name = labels.get(POOL_LABEL)
        if name:
            pool = found.setdefault(name, {"pool": name})
            pool.setdefault("sharing", labels.get(GPU_SHARING_LABEL))
            pool["capacityType"] = get(group.props, "capacityType", default="ON_DEMAND")
    return found


# --- rule 2 ----------------------------------------------------------------------------------


def _host_name(host: str, namespace: str) -> tuple[str, str]:
    """(namespace, name) of a Kubernetes service host: `name`, `name.ns` or `name.ns.svc...`."""
    parts = host.split(".")
    return (parts[1] if len(parts) > 1 else namespace), parts[0]


def latency_sensitive(args: Any, workloads: list[GpuWorkload]) -> dict[str, str]:
    """Why each latency-sensitive GPU workload is one, by URN: its own label, or a route that
    sends it requests of a latency-sensitive tier (a VirtualService route matching the tier
    header, or taking any tier, to a Service or Knative service whose pods the workload runs, or
    to an endpoint picker's Service whose InferencePool selects them).
    A model that serves premium is latency-sensitive whatever its profile's label says."""
    settings = config(args)
    tier_header = settings.get("tierHeader", DEFAULT_TIER_HEADER)
    tiers = set(settings.get("latencySensitiveTiers", ["premium"]))
    why = {w.resource.urn: "it is labelled latency-sensitive" for w in workloads if w.labels.get(LATENCY_LABEL) == "true"}
    selectors = {
        (namespace_of(s.props), name_of(s.props)): get(s.props, "spec", "selector", default={})
        for s in of_type(args, "kubernetes:core/v1:Service")
    }
    subsets = {
        (fqdn(get(rule.props, "spec", "host", default=""), namespace_of(rule.props)), get(s, "name")): get(
            s, "labels", default={}
        )
        for rule in of_type(args, DESTINATION_RULE)
        for s in get(rule.props, "spec", "subsets", default=[])
    }
    # A route to an endpoint picker's Service reaches the pods its InferencePool selects.
    picked = {
        (namespace_of(pool.props), get(pool.props, "spec", "endpointPickerRef", "name", default="")): get(
            pool.props, "spec", "selector", default={}
        )
        for pool in of_type(args, INFERENCE_POOL)
    }
    for service in of_type(args, VIRTUAL_SERVICE):
        namespace = namespace_of(service.props)
        for route in get(service.props, "spec", "http", default=[]):
            matches = get(route, "match", default=[]) or [{}]
            asked = {get(m, "headers", tier_header, "exact") for m in matches}
            # A match without an exact tier takes requests of every tier.
            served = sorted(tiers if None in asked else asked & tiers)
            if not served:
                continue
            for destination in get(route, "route", default=[]):
                host = get(destination, "destination", "host", default="")
                target = _host_name(get(destination, "headers", "request", "set", "Host") or host, namespace)
                pods = dict(selectors.get(target, {}))
                subset = get(destination, "destination", "subset")
                if subset is not None:
                    pods.update(subsets.get((fqdn(host, namespace), subset), {}))
                pool = picked.get(target)
                for w in workloads:
                    reached = (
                        (w.knative and (w.namespace, w.name) == target)
                        or (w.namespace == target[0] and labels_match(pods, w.pod_labels))
                        or (pool is not None and w.namespace == target[0] and selector_matches(pool, w.pod_labels))
                    )
                    if reached and w.resource.urn not in why:
                        why[w.resource.urn] = (
                            f"VirtualService {namespace}/{name_of(service.props)} sends it {', '.join(served)} requests"
                        )
    return why


def _latency_sensitive_on_pools(args: Any, key: str, value: str) -> Iterator[tuple[GpuWorkload, str, str]]:
    """(workload, why it is latency-sensitive, pool) for each pool whose `key` is `value` that a
    latency-sensitive workload may run on."""
    known = pools(args)
    workloads = gpu_workloads(args)
    reasons = latency_sensitive(args, workloads)
    for workload in workloads:
        why = reasons.get(workload.resource.urn)
        if why is None:
            continue
        for pool in sorted(workload.pools or ()):
            if get(known.get(pool, {}), key) == value:
                yield workload, why, pool


def latency_sensitive_not_time_sliced(args: Any, report_violation: Report) -> None:
    for workload, why, pool in _latency_sensitive_on_pools(args, "sharing", "timeSlicing"):
        report_violation(
            f"{workload.label} is latency-sensitive ({why}) but may run on time-sliced pool '{pool}': time-slicing "
            "gives no isolation",
            workload.resource.urn,
        )


def latency_sensitive_min_scale(args: Any, report_violation: Report) -> None:
    """Latency-sensitive Knative services keep a replica warm: scaled to zero, the next request
    waits minutes for a model to load (Knative's min-scale defaults to 0)."""
    workloads = [w for w in gpu_workloads(args) if w.knative]
    reasons = latency_sensitive(args, workloads)
    for workload in workloads:
        why = reasons.get(workload.resource.urn)
        if why is None:
            continue
        minimum = _knative_scale(workload, "min-scale", 0)  # not a whole number: Knative's default, 0
        if minimum < 1:
            report_violation(
                f"{workload.label} is latency-sensitive ({why}) with min-scale {minimum}: it would cold-start a model "
                "(minutes) on the next request",
                workload.resource.urn,
            )


def gpu_pools(args: Any) -> set[str]:
    """The pools of the stack that offer GPUs: its GPU pool components, and node groups labelled
    with a GPU sharing mode."""
    found = {get(c.props, "pool") for c in of_type(args, GPU_NODE_POOL) if get(c.props, "pool")}
    for group in of_type(args, NODE_GROUP):
        labels = get(group.props, "labels", default={})
        if labels.get(POOL_LABEL) and labels.get(GPU_SHARING_LABEL):
            found.add(labels[POOL_LABEL])
    return found


def gpu_pod_placement(args: Any, report_violation: Report) -> None:
    """GPU pods name the pools they run on (nodeSelector or required node affinity on the pool
    label), and those pools are GPU pools: the pool rules (time-slicing, spot, capacity) can
    only hold for pods whose pool is known."""
    known = gpu_pools(args)
    for workload in gpu_workloads(args):
        if workload.pools is None:
            report_violation(
                f"{workload.label} uses a GPU but names no pool: place it with a nodeSelector or a required node affinity "
                f"on {POOL_LABEL}",
                workload.resource.urn,
            )
        elif not workload.pools:
            report_violation(
                f"{workload.label}: its nodeSelector and required node affinity name no pool in common, so it can never be "
                "scheduled",
                workload.resource.urn,
            )
        elif known and workload.pools - known:
            report_violation(
                f"{workload.label} uses a GPU but may be placed on {', '.join(sorted(workload.pools - known))}, not a GPU "
                f"pool of this stack (GPU pools: {', '.join(sorted(known))})",
                workload.resource.urn,
            )


# --- rule 3 (PDB part) -------------------------------------------------------------------------


def _knative_scale(workload: GpuWorkload, key: str, default: int) -> int:
    annotations = get(workload.resource.props, "spec", "template", "metadata", "annotations", default={})
    try:
        return int(annotations.get(f"autoscaling.knative.dev/{key}", default) or 0)
    except ValueError:
        return default


def _replica_range(workload: GpuWorkload, scalers: dict[tuple[str, str], tuple[int, int]]) -> tuple[int, int]:
    """The fewest and the most replicas a workload runs (its autoscaler's bounds, else its
    replicas; a Knative service's min-scale and max-scale, 0 meaning unbounded)."""
    if workload.knative:
        return _knative_scale(workload, "min-scale", 0), _knative_scale(workload, "max-scale", 0) or 1000
    replicas = get(workload.resource.props, "spec", "replicas", default=1)
    low, high = scalers.get((workload.namespace, workload.name), (replicas, replicas))
    return low, max(replicas, high)


def _scaled(value: Any, replicas: int) -> float:
    """A PDB's count, or its percentage of the replicas rounded up, as the disruption controller
    reads both fields (intstr.GetScaledValueFromIntOrPercent with roundUp true)."""
    text = str(value)
    if text.endswith("%"):
        return math.ceil(float(text[:-1]) * replicas / 100)
    return float(value)


def _blocks_every_drain(spec: Mapping[str, Any], fewest: int) -> str | None:
    """Why a budget lets no pod be evicted when the workload runs its fewest replicas, or None:
    maxUnavailable 0, or minAvailable at least those replicas (kubernetes
    pkg/controller/disruption/disruption.go: getExpectedPodCount, disruptionsAllowed =
    currentHealthy - desiredHealthy)."""
    unavailable, available = get(spec, "maxUnavailable"), get(spec, "minAvailable")
    try:
        if unavailable is not None and _scaled(unavailable, max(fewest, 1)) <= 0:
            return f"maxUnavailable {unavailable}"
        if available is not None and fewest > 0 and _scaled(available, fewest) >= fewest:
            return f"minAvailable {available} with as few as {fewest} replicas"
    except ValueError:
        return f"a budget of {unavailable if available is None else available}, which is not a count or a percentage"
    return None


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
            why = _blocks_every_drain(get(budget.props, "spec", default={}), fewest)
            if why is not None:
                report_violation(
                    f"PodDisruptionBudget {workload.namespace}/{name_of(budget.props)} ({why}) lets no pod of {workload.label} "
                    "be evicted: every node drain and upgrade stalls; allow one (maxUnavailable 1)",
                    budget.urn,
                )


# --- rule 6 ------------------------------------------------------------------------------------


def canary_routes(args: Any, report_violation: Report) -> None:
    settings = config(args)
    default_headers = set(settings.get("overrideHeaders", [DEFAULT_OVERRIDE_HEADER]))
    subsets = {
        (fqdn(get(rule.props, "spec", "host", default=""), namespace_of(rule.props)), get(s, "name"))
        for rule in of_type(args, DESTINATION_RULE)
        for s in get(rule.props, "spec", "subsets", default=[])
    }
    for service in of_type(args, VIRTUAL_SERVICE):
        namespace = namespace_of(service.props)
        declared = get(service.props, "metadata", "annotations", OVERRIDE_HEADER_ANNOTATION)
        override_headers = default_headers | ({declared} if declared else set())
        where = f"VirtualService {namespace}/{name_of(service.props)}"
        routes = get(service.props, "spec", "http", default=[])
        kinds = []
        for index, route in enumerate(routes):
            matches = get(route, "match", default=[])
            overriding = bool(matches) and all(override_headers & set(get(m, "headers", default={})) for m in matches)
            kinds.append(overriding)
            destinations = get(route, "route", default=[])
            if len(destinations) > 1 or any("weight" in d for d in destinations):
                total = sum(get(d, "weight", default=0) for d in destinations)
                if total != 100:
                    report_violation(
                        f"{where} route {index} ('{get(route, 'name', default='')}') weights add up to {total}, not 100",
                        service.urn,
                    )
            for d in destinations:
                host, subset = get(d, "destination", "host", default=""), get(d, "destination", "subset")
                if subset is not None and (fqdn(host, namespace), subset) not in subsets:
                    report_violation(
                        f"{where} route {index} sends to subset '{subset}' of {host}, which no DestinationRule defines",
                        service.urn,
                    )
        if True in kinds and False in kinds:
            last_override = len(kinds) - 1 - kinds[::-1].index(True)
            if kinds.index(False) < last_override:
                report_violation(
                    f"{where}: version-override route {last_override} comes after another route; override routes must come first",
                    service.urn,
                )


# --- rule 7 ------------------------------------------------------------------------------------


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


# --- rule 10 -----------------------------------------------------------------------------------


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


# --- endpoint pickers --------------------------------------------------------------------------

# PeerAuthentication modes that accept plaintext (istio security/v1beta1 MutualTLS.Mode).
PLAINTEXT_MODES = {"PERMISSIVE", "DISABLE"}


class EndpointPicker:
    """An endpoint picker Deployment: the program labels it and its pods with the component."""

    def __init__(self, resource: Any):
        template = get(resource.props, "spec", "template", default={})
        self.resource = resource
        self.namespace = namespace_of(resource.props)
        self.name = name_of(resource.props)
        self.pod_labels = dict(get(template, "metadata", "labels", default={}))
        self.pod_annotations = dict(get(template, "metadata", "annotations", default={}))
        replicas = get(resource.props, "spec", "replicas", default=1)
        # Numbers arrive from the engine as floats; anything else is no replica count.
        self.replicas = int(replicas) if isinstance(replicas, (int, float)) else 0

    @property
    def label(self) -> str:
        return f"endpoint picker {self.namespace}/{self.name}"


def endpoint_pickers(args: Any) -> list[EndpointPicker]:
    return [
        EndpointPicker(d)
        for d in of_type(args, DEPLOYMENT)
        if ENDPOINT_PICKER
        in (
            get(d.props, "metadata", "labels", COMPONENT_LABEL),
            get(d.props, "spec", "template", "metadata", "labels", COMPONENT_LABEL),
        )
    ]


def _leaves_none_up(spec: Mapping[str, Any], replicas: int) -> str | None:
    """Why a budget may let every replica go at once, or None: minAvailable below one pod, or
    maxUnavailable of every replica, both scaled as the disruption controller does."""
    unavailable, available = get(spec, "maxUnavailable"), get(spec, "minAvailable")
    try:
        if available is not None:
            return f"minAvailable {available}" if _scaled(available, replicas) < 1 else None
        if unavailable is not None:
            return f"maxUnavailable {unavailable} of {replicas} replicas" if _scaled(unavailable, replicas) >= replicas else None
    except ValueError:
        return f"a budget of {unavailable if available is None else available}, which is not a count or a percentage"
    return "neither minAvailable nor maxUnavailable"


def _production_endpoint_pickers(args: Any, pickers: list[EndpointPicker], report_violation: Report) -> None:
    """Every request to a model version goes through its picker: in production it runs more than
    one replica, and a node drain may not take them all at once."""
    floor = int(config(args).get("minReplicasInProduction", FLOORS["minEndpointPickerReplicasInProduction"]))
    budgets: dict[str, list[Any]] = defaultdict(list)
    for budget in of_type(args, PDB):
        budgets[namespace_of(budget.props)].append(budget)
    for picker in pickers:
        replicas = picker.replicas
        if replicas < floor:
            report_violation(
                f"{picker.label} runs {replicas} replica(s); production keeps at least {floor}, or every request to the model "
                f"waits on one pod's restart: set spec.replicas to {floor} or more",
                picker.resource.urn,
            )
        covering = [b for b in budgets[picker.namespace] if selector_matches(get(b.props, "spec", "selector"), picker.pod_labels)]
        if not covering:
            report_violation(
                f"{picker.label}: no PodDisruptionBudget in {picker.namespace} selects its pods, so a node drain may take every "
                "replica at once: add one selecting its pod labels with maxUnavailable 1",
                picker.resource.urn,
            )
        for budget in covering:
            spec = get(budget.props, "spec", default={})
            # One replica cannot be kept up through a drain by any budget: the floor above speaks for it.
            why = _leaves_none_up(spec, replicas) if replicas > 1 else None
            if why is not None:
                report_violation(
                    f"PodDisruptionBudget {picker.namespace}/{name_of(budget.props)} ({why}) lets a drain take every pod of "
                    f"{picker.label}: set maxUnavailable 1",
                    budget.urn,
                )
                continue
            why = _blocks_every_drain(spec, replicas)
            if why is not None:
                report_violation(
                    f"PodDisruptionBudget {picker.namespace}/{name_of(budget.props)} ({why}) lets no pod of {picker.label} be "
                    "evicted: every node drain and upgrade stalls; set maxUnavailable 1",
                    budget.urn,
                )


def _pools_name_endpoint_pickers(args: Any, pickers: list[EndpointPicker], report_violation: Report) -> None:
    """An InferencePool's endpointPickerRef (group "" and kind Service by default, GAIE
    inference.networking.k8s.io/v1 EndpointPickerRef) is a Service of its namespace that selects
    the pods of an endpoint picker."""
    services = {(namespace_of(s.props), name_of(s.props)): s for s in of_type(args, SERVICE)}
    for pool in of_type(args, INFERENCE_POOL):
        namespace = namespace_of(pool.props)
        where = f"InferencePool {namespace}/{name_of(pool.props)}"
        ref = get(pool.props, "spec", "endpointPickerRef", default={})
        group, kind, name = get(ref, "group", default=""), get(ref, "kind", default="Service"), get(ref, "name")
        if group != "" or kind != "Service":
            report_violation(
                f"{where}: spec.endpointPickerRef is a {kind} of group '{group}', not a Service: name the endpoint picker's "
                "Service (kind Service, group '')",
                pool.urn,
            )
        elif not name:
            report_violation(f"{where} names no endpoint picker: set spec.endpointPickerRef.name to the EPP's Service", pool.urn)
        elif (namespace, name) not in services:
            report_violation(
                f"{where}: spec.endpointPickerRef names Service {namespace}/{name}, which the stack does not declare: declare "
                "the endpoint picker's Service in the pool's namespace, or name it",
                pool.urn,
            )
        else:
            selector = get(services[(namespace, name)].props, "spec", "selector", default={})
            if not any(p.namespace == namespace and labels_match(selector, p.pod_labels) for p in pickers):
                report_violation(
                    f"{where}: its endpoint picker Service {namespace}/{name} (selector {dict(selector)}) selects no pod of "
                    f"an endpoint picker Deployment: select the pods of the Deployment labelled {COMPONENT_LABEL}: "
                    f"{ENDPOINT_PICKER}",
                    pool.urn,
                )


def _endpoint_pickers_in_the_mesh(args: Any, pickers: list[EndpointPicker], report_violation: Report) -> None:
    """mTLS is promised on every hop, gateway -> picker -> model server: the pickers keep their
    sidecar, and no PeerAuthentication of a tenant namespace accepts plaintext."""
    for picker in pickers:
        where = "label" if SIDECAR_INJECT in picker.pod_labels else "annotation"
        value = picker.pod_labels.get(SIDECAR_INJECT, picker.pod_annotations.get(SIDECAR_INJECT, ""))
        if value != "" and str(value).lower() not in INJECT_ASKED:
            report_violation(
                f"{picker.label} opts its pods out of the mesh ({where} {SIDECAR_INJECT}: {value!r}): without the sidecar the "
                "gateway -> picker and picker -> server hops lose mTLS; remove it from the pod template",
                picker.resource.urn,
            )
    tenants = (
        _tenant_namespaces(args)
        | {p.namespace for p in pickers}
        | {namespace_of(pool.props) for pool in of_type(args, INFERENCE_POOL)}
    )
    for peer in of_type(args, PEER_AUTHENTICATION):
        namespace = namespace_of(peer.props)
        if namespace not in tenants:
            continue
        spec = get(peer.props, "spec", default={})
        scope = "for the workloads it selects" if get(spec, "selector") else "for the whole namespace"
        weak = []
        mode = str(get(spec, "mtls", "mode", default="")).upper()
        if mode in PLAINTEXT_MODES:
            weak.append(f"mTLS mode {mode} {scope}")
        for port, setting in get(spec, "portLevelMtls", default={}).items():
            port_mode = str(get(setting, "mode", default="")).upper()
            if port_mode in PLAINTEXT_MODES:
                weak.append(f"mTLS mode {port_mode} on port {port}")
        if weak:
            report_violation(
                f"PeerAuthentication {namespace}/{name_of(peer.props)} in tenant namespace {namespace} sets "
                f"{', '.join(weak)}: mTLS is promised on every hop; set STRICT (or UNSET, to inherit the namespace's)",
                peer.urn,
            )


def _production_servers_behind_pickers(args: Any, report_violation: Report) -> None:
    """In production a model's pods, Deployment- or Knative-served, are picked by an endpoint
    picker: only the picker's queue is bounded in time per tier (the gateway's pending queue,
    vLLM's scheduler, queue-proxy and Knative's activator have no timer below the route's
    timeout: knative/serving knative-v1.23.0 cmd/activator/main.go), so each server's pods are
    selected by an InferencePool of their namespace."""
    pools = defaultdict(list)
    for pool in of_type(args, INFERENCE_POOL):
        pools[namespace_of(pool.props)].append(get(pool.props, "spec", "selector"))
    for kind, server in [(DEPLOYMENT, r) for r in of_type(args, DEPLOYMENT)] + [
        (KNATIVE_SERVICE, r) for r in of_type(args, KNATIVE_SERVICE)
    ]:
        labels = pod_labels(kind, server.props)
        model = labels.get(MODEL_LABEL)
        if model is None:
            continue
        namespace = namespace_of(server.props)
        if not any(selector_matches(selector, labels) for selector in pools[namespace]):
            what = "Deployment" if kind == DEPLOYMENT else "Knative Service"
            report_violation(
                f"{what} {namespace}/{name_of(server.props)} serves model {model!r} with no InferencePool selecting "
                "its pods: in production every request's wait is bounded in time, which only the endpoint picker's "
                "queue does; keep the model's endpoint picker (endpointPicker.enabled)",
                server.urn,
            )


def endpoint_picker_availability(args: Any, report_violation: Report) -> None:
    pickers = endpoint_pickers(args)
    if is_production(args):
        _production_endpoint_pickers(args, pickers, report_violation)
        _production_servers_behind_pickers(args, report_violation)
    _pools_name_endpoint_pickers(args, pickers, report_violation)
    _endpoint_pickers_in_the_mesh(args, pickers, report_violation)


KNATIVE_SERVING_CR = "kubernetes:operator.knative.dev/v1beta1:KnativeServing"


def _replicas_of(values: Mapping[str, Any], enabled: tuple[str, ...], minimum: tuple[str, ...]) -> Any:
    """A chart's replica floor from its values: the autoscaler's minimum unless it is turned off,
    then the fixed count (`replicaCount`); the chart's default (1) where neither is given."""
    if get(values, *enabled, default=True) is not False:
        return get(values, *minimum, default=1)
    return get(values, "replicaCount", default=1)


def _budgeted(args: Any, namespace: str, selector: Mapping[str, str]) -> bool:
    """Whether a PodDisruptionBudget of `namespace` selects pods labelled `selector`."""
    return any(
        namespace_of(pdb.props) == namespace and selector_matches(get(pdb.props, "spec", "selector"), dict(selector))
        for pdb in of_type(args, PDB)
    )


def control_plane_availability(args: Any, report_violation: Report) -> None:
    """In production every request depends on istiod (certificates, configuration), the ingress
    gateway, Knative Serving's control plane (activator, autoscaler, controller, webhook) and Kueue's
    manager (its webhook admits every batch Job), and the cluster autoscaler (the nodes of a peak):
    each runs at least minReplicasInProduction
    replicas, spread over nodes, the gateway behind a PodDisruptionBudget (istiod's and Kueue's
    charts make theirs; Knative's activator and webhook come with theirs and with pod
    anti-affinity, knative/serving knative-v1.23.0 config/core/deployments), so one crash, node loss
    or drain takes none of it away. Read where the program sets them:
    the istiod chart's `autoscaleMin` (istio 1.30.3), the gateway chart's
    `autoscaling.minReplicas`, Kueue's `controllerManager.replicas` with its PodDisruptionBudget
    enabled (kueue 0.19.2), the cluster autoscaler chart's `replicaCount`, and KnativeServing's
    `spec.high-availability.replicas` (knative/operator knative-v1.23.0)."""
    if not is_production(args):
        return
    floor = int(config(args).get("minReplicasInProduction", FLOORS["minControlPlaneReplicasInProduction"]))
    for release in of_type(args, HELM_RELEASE):
        chart = str(get(release.props, "chart", default="")).rsplit("/", 1)[-1]
        values = get(release.props, "values", default={}) or {}
        where = f"Helm release {get(release.props, 'namespace', default='?')}/{get(release.props, 'name', default='?')} ({chart})"
        if chart == "istiod":
            replicas = _replicas_of(values, ("autoscaleEnabled",), ("autoscaleMin",))
            key = "autoscaleMin"
            placement: tuple[str, ...] = ()
        elif chart == "gateway":
            replicas = _replicas_of(values, ("autoscaling", "enabled"), ("autoscaling", "minReplicas"))
            key = "autoscaling.minReplicas"
            placement = ()
            if not _budgeted(args, get(release.props, "namespace", default=""), GATEWAY_SELECTOR):
                report_violation(
                    f"{where}: no PodDisruptionBudget selects the gateway's pods, so a drain may take every replica",
                    release.urn,
                )
        elif chart == "kueue":
            replicas = get(values, "controllerManager", "replicas", default=1)
            key = "controllerManager.replicas"
            placement = ("controllerManager",)
            if get(values, "controllerManager", "podDisruptionBudget", "enabled") is not True:
                report_violation(
                    f"{where}: no PodDisruptionBudget for Kueue's manager, so a drain may take every replica: set "
                    "controllerManager.podDisruptionBudget.enabled",
                    release.urn,
                )
        elif chart == "cluster-autoscaler":
            # One leads, the others stand by (leader election is the binary's default); the chart's
            # default PodDisruptionBudget keeps one through a drain.
            replicas = get(values, "replicaCount", default=1)
            key = "replicaCount"
            placement = ()
        else:
            continue
        spread = get(values, *placement, default={}) or {}
        if not get(spread, "topologySpreadConstraints") and not get(spread, "affinity", "podAntiAffinity"):
            report_violation(
                f"{where}: its replicas may share a node (no topologySpreadConstraints or podAntiAffinity at "
                f"{'.'.join((*placement, 'topologySpreadConstraints')) or 'topologySpreadConstraints'}): one node "
                "lost takes all of it",
                release.urn,
            )
        count = whole_number(replicas)
        if (count or 0) < floor:
            shown = count if count is not None else repr(replicas)
            report_violation(
                f"{where} runs {shown} replica(s) at least; production keeps at least {floor} of what every request "
                f"depends on: set {key} to {floor} or more",
                release.urn,
            )
    for serving in of_type(args, KNATIVE_SERVING_CR):
        replicas = get(serving.props, "spec", "high-availability", "replicas", default=1)
        if (whole_number(replicas) or 0) < floor:
            replicas = whole_number(replicas) if whole_number(replicas) is not None else replicas
            report_violation(
                f"KnativeServing {namespace_of(serving.props)}/{name_of(serving.props)} runs its control plane (activator, "
                f"autoscaler, controller, webhook) at {replicas!r} replica(s); production keeps at least {floor}: set "
                f"spec.high-availability.replicas to {floor} or more",
                serving.urn,
            )


def gpu_jobs_through_kueue(args: Any, report_violation: Report) -> None:
    """A Job in a tenant namespace whose pods ask for GPUs (a batch/v1 Job, or the jobs a CronJob
    makes) is labelled with the LocalQueue it is queued in, one of its own namespace. Kueue reads
    only that label (pkg/controller/jobframework/utils.go QueueNameForObject at v0.19.2; an empty
    value is none). Its job webhook fills it in only where the namespace has a LocalQueue named
    `default` (jobframework/defaults.go), which the platform never declares; otherwise Kueue
    ignores a Job without it (manageJobsWithoutQueueName is off: jobframework/reconciler.go), so
    such a Job starts at once, outside the tenant's batch quota and the cohort's preemption. A
    label naming a LocalQueue its namespace does not have leaves the Job suspended until one of
    that name exists ("LocalQueue ... doesn't exist", core/workload_controller.go). This checks the
    Jobs the stack declares; the ValidatingAdmissionPolicy `gpu-jobs-through-kueue` the Kueue
    component installs refuses tenants' own unlabelled GPU Jobs in the cluster."""
    tenants = _tenant_namespaces(args)
    queues = {(namespace_of(q.props), name_of(q.props)) for q in of_type(args, LOCAL_QUEUE)}
    external = (str(entry).partition("/") for entry in config(args).get("externalLocalQueues", []))
    queues |= {(ns, name) for ns, slash, name in external if slash}
    for resource in args.resources:
        if resource.resource_type not in (BATCH_JOB, CRON_JOB):
            continue
        namespace = namespace_of(resource.props)
        template = pod_template(resource.resource_type, resource.props)
        if namespace not in tenants or template is None or not pod_gpu_resources(get(template, "spec", default={})):
            continue
        # Kueue reads the Job's own labels: for a CronJob, its job template's.
        cron = resource.resource_type == CRON_JOB
        job_metadata = get(resource.props, "spec", "jobTemplate", "metadata") if cron else get(resource.props, "metadata")
        queue = get(job_metadata, "labels", QUEUE_NAME_LABEL)
        where = f"{'CronJob' if cron else 'Job'} {namespace}/{name_of(resource.props)}"
        own = sorted(name for ns, name in queues if ns == namespace)
        choices = f"one of {', '.join(own)}" if own else f"a LocalQueue of namespace {namespace} (it has none)"
        if not queue:
            report_violation(
                f"{where} asks for GPUs without the label {QUEUE_NAME_LABEL}: Kueue leaves it alone, so it runs at once "
                f"outside the tenant's batch quota; label it with {choices}",
                resource.urn,
            )
        elif (namespace, queue) not in queues:
            report_violation(
                f"{where} is labelled {QUEUE_NAME_LABEL}: {queue}, a LocalQueue namespace {namespace} does not have: Kueue "
                f"holds it suspended until that LocalQueue exists; name {choices}",
                resource.urn,
            )


# --- advisory ----------------------------------------------------------------------------------


def model_server_monitoring(args: Any, report_violation: Report) -> None:
    # Pod selectors, by namespace, of everything that scrapes pods.
    scraped: dict[str, list[Mapping[str, str]]] = defaultdict(list)
    services: dict[str, list[tuple[Mapping[str, str], Mapping[str, str]]]] = defaultdict(list)
    for service in of_type(args, "kubernetes:core/v1:Service"):
        services[namespace_of(service.props)].append(
            (get(service.props, "metadata", "labels", default={}), get(service.props, "spec", "selector", default={}))
        )
    for monitor in of_type(args, SERVICE_MONITOR):
        namespace = namespace_of(monitor.props)
        selector = get(monitor.props, "spec", "selector", "matchLabels", default={})
        scraped[namespace] += [pods for labels, pods in services[namespace] if labels_match(selector, labels)]
    for monitor in of_type(args, POD_MONITOR):
        scraped[namespace_of(monitor.props)].append(get(monitor.props, "spec", "selector", "matchLabels", default={}))
    for workload in gpu_workloads(args):
        # A Job (an offline batch job) runs to completion and serves nothing to scrape.
        if workload.resource.resource_type == BATCH_JOB:
            continue
        if not any(labels_match(selector, workload.pod_labels) for selector in scraped[workload.namespace]):
            report_violation(
                f"{workload.namespace}/{workload.name} serves a model but nothing scrapes its metrics (no ServiceMonitor or "
                "PodMonitor)",
                workload.resource.urn,
            )


def latency_sensitive_on_spot(args: Any, report_violation: Report) -> None:
    for workload, why, pool in _latency_sensitive_on_pools(args, "capacityType", "SPOT"):
        report_violation(
            f"{workload.label} is latency-sensitive ({why}) on spot pool '{pool}': expect interruptions",
            workload.resource.urn,
        )


def _selects_the_gateway(props: Any) -> bool:
    """A policy of the gateway's namespace whose selector matches the gateway's pods (none: all)."""
    selector = get(props, "spec", "selector", "matchLabels", default={}) or {}
    return namespace_of(props) == GATEWAY_NAMESPACE and labels_match(selector, GATEWAY_SELECTOR)


def _redirect_only(args: Any) -> tuple[set[str], set[str]]:
    """The listener ports (as strings) and hosts of the Gateway servers on the gateway's pods that
    only redirect to HTTPS: what a rule may admit without a token."""
    ports: set[str] = set()
    hosts: set[str] = set()
    for gateway in of_type(args, ISTIO_GATEWAY):
        if not labels_match(get(gateway.props, "spec", "selector", default={}) or {}, GATEWAY_SELECTOR):
            continue
        for server in get(gateway.props, "spec", "servers", default=[]) or []:
            if get(server, "tls", "httpsRedirect"):
                number = get(server, "port", "number")
                ports.add(str(GATEWAY_LISTENER_PORTS.get(number, number)))
                for host in get(server, "hosts", default=[]) or []:
                    hosts |= {host, f"{host}:*"}
    return ports, hosts


def _identified(source: Any) -> bool:
    """A `from` source that names who the caller is: a verified token's principal, or a mesh
    identity (a peer principal)."""
    return bool(get(source, "requestPrincipals")) or bool(get(source, "principals"))


def gateway_requires_a_token(args: Any, report_violation: Report) -> None:
    """The ingress gateway verifies tokens (a RequestAuthentication selects it) and admits only
    identified callers (an ALLOW AuthorizationPolicy selects it, and each of its rules names
    request principals or a mesh identity), except on a listener that only redirects to HTTPS, for
    that server's hosts. A rule that admits anyone elsewhere, a missing ALLOW policy (Istio then
    admits every request) or a missing RequestAuthentication would let requests reach the models
    without a token."""
    if not of_type(args, ISTIO_GATEWAY):
        return
    if not any(_selects_the_gateway(r.props) for r in of_type(args, REQUEST_AUTHENTICATION)):
        report_violation(
            f"no RequestAuthentication in {GATEWAY_NAMESPACE} selects the gateway's pods {GATEWAY_SELECTOR}: tokens would not "
            "be verified; declare one for the issuer (traffic.authentication)",
            None,
        )
    allows = [
        r for r in of_type(args, AUTHORIZATION_POLICY)
        if _selects_the_gateway(r.props) and str(get(r.props, "spec", "action", default="ALLOW")).upper() == "ALLOW"
    ]  # fmt: skip
    if not allows:
        report_violation(
            f"no ALLOW AuthorizationPolicy in {GATEWAY_NAMESPACE} selects the gateway's pods {GATEWAY_SELECTOR}: Istio admits "
            "every request, with a token or without; declare one requiring a request principal",
            None,
        )
    redirect_ports, redirect_hosts = _redirect_only(args)
    for policy in allows:
        where = f"AuthorizationPolicy {GATEWAY_NAMESPACE}/{name_of(policy.props)}"
        for index, rule in enumerate(get(policy.props, "spec", "rules", default=[]) or []):
            sources = [get(entry, "source", default={}) or {} for entry in get(rule, "from", default=[]) or []]
            if sources:
                if not all(_identified(source) for source in sources):
                    report_violation(
                        f"{where} rule {index} admits a source that names no request principal or mesh identity: every "
                        "`from` source of the gateway's ALLOW rules must name requestPrincipals or principals",
                        policy.urn,
                    )
                continue
            operations = [get(entry, "operation", default={}) or {} for entry in get(rule, "to", default=[]) or []]
            scoped = operations and all(
                set(map(str, get(o, "ports", default=[]) or [])) <= redirect_ports
                and get(o, "ports")
                and set(get(o, "hosts", default=[]) or []) <= redirect_hosts
                and get(o, "hosts")
                for o in operations
            )
            if not scoped:
                report_violation(
                    f"{where} rule {index} admits requests without a token (no `from`) beyond the HTTPS-redirect listeners "
                    f"(ports {sorted(redirect_ports) or 'none'}, hosts {sorted(redirect_hosts) or 'none'}): name who may call, "
                    "or limit it to those ports and hosts",
                    policy.urn,
                )


# --- tenant data ----------------------------------------------------------------------------------

ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
POD_IDENTITY_ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
# Other ways a policy reaches a role: none of them is the program's for a tenant's or the mirror's role.
ATTACHED_POLICIES = ("aws:iam/rolePolicyAttachment:RolePolicyAttachment", "aws:iam/policy:Policy")
TENANT_DATA: Mapping[str, str] = FACTS["tenantData"]
# What a tenant's role may do in the weight mirror's bucket: read its own copies.
READ_ACTIONS = frozenset({"s3:GetObject", "s3:ListBucket"})
# `system:serviceaccount:<namespace>:<name>` in a trust policy (IRSA's subject condition).
_SERVICE_ACCOUNT_SUBJECT = re.compile(r"system:serviceaccount:([^:\"]+):([^\"]+)")
# A key prefix the program writes: letters, digits and `-_.=/` (platform_config/models.py S3_URI_PATTERN), with at
# most a trailing `*` after a `/`, or `*` alone (every key).
_KEY_PREFIX = re.compile(r"\*|[A-Za-z0-9._=/-]*(/\*)?")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def _s3_parts(uri: str) -> tuple[str, tuple[str, ...]]:
    bucket, _, path = uri.removeprefix("s3://").partition("/")
    return bucket, tuple(part for part in path.split("/") if part)


def _s3_within(uri: str, prefix: str) -> bool:
    """By whole path segments, as the program's platform_config/tenant_data.py s3_within (the pack imports none of it)."""
    bucket, path = _s3_parts(uri)
    prefix_bucket, prefix_path = _s3_parts(prefix)
    return bucket == prefix_bucket and path[: len(prefix_path)] == prefix_path


def _as_list(value: Any) -> list[Any]:
    return list(value) if is_list(value) else [value]


def _granted_locations(statement: Mapping[str, Any]) -> Iterator[str | None]:
    """The S3 locations an Allow statement reaches, as s3:// URIs: an object ARN's key prefix (its trailing `/*`
    dropped), a bucket ARN's listing under each `s3:prefix` it is conditioned on (StringLike, as the program writes
    it; any other condition: the whole bucket). None for what no location says: not an S3 ARN, a wildcard anywhere
    but a trailing `/*`, a bucket name that is not one."""
    prefixes = get(statement, "Condition", "StringLike", "s3:prefix", default=None)
    for resource in _as_list(get(statement, "Resource", default=[])):
        text = str(resource)
        if not text.startswith("arn:aws:s3:::"):
            yield None
            continue
        bucket, _, key = text.removeprefix("arn:aws:s3:::").partition("/")
        if not _BUCKET.fullmatch(bucket):
            yield None
            continue
        keys = [key] if key or prefixes is None else [str(p) for p in _as_list(prefixes)]
        for key in keys:
            yield f"s3://{bucket}/{key.removesuffix('*')}" if _KEY_PREFIX.fullmatch(key) else None


def _declared_prefixes(args: Any) -> dict[str, list[str]]:
    """Each tenant's prefixes: the pack's `tenantS3Prefixes` where set (then it names every tenant's), else what the
    tenant's namespace declares."""
    configured = config(args).get("tenantS3Prefixes")
    if configured:
        return {str(tenant): [str(p) for p in prefixes] for tenant, prefixes in configured.items()}
    declared: dict[str, list[str]] = {}
    for namespace in of_type(args, NAMESPACE):
        tenant = get(namespace.props, "metadata", "labels", TENANT_LABEL)
        raw = get(namespace.props, "metadata", "annotations", TENANT_DATA["s3PrefixesAnnotation"], default="[]")
        try:
            prefixes = json.loads(raw)
        except (TypeError, ValueError):
            prefixes = None
        if tenant:
            declared[str(tenant)] = [str(p) for p in prefixes] if is_list(prefixes) else []
    return declared


class _RolePolicy:
    """An inline role policy, whose role it is and its statements (None: not a policy document)."""

    def __init__(self, policy: Any, role: Any, owner: tuple[str, str] | None, problem: str | None):
        self.policy, self.role, self.owner, self.problem = policy, role, owner, problem
        try:
            document = json.loads(get(policy.props, "policy", default=""))
        except (TypeError, ValueError):
            document = None
        statements = get(document, "Statement", default=None) if isinstance(document, dict) else None
        self.statements: list[Any] | None = _as_list(statements) if statements is not None else None


def _owner(role: Any, association: Any, tenants: set[str]) -> tuple[tuple[str, str] | None, str | None]:
    """Whose a role is, ("tenant" | "mirror", tenant), and what is wrong with it: by the namespace its pods are in (the
    Pod Identity association beside it, the service accounts its trust policy names), which its tag must agree with;
    by its tag alone where neither names a namespace."""
    mirror = TENANT_DATA["mirrorNamespace"]
    accounts = []
    if association is not None:
        accounts.append(
            (str(get(association.props, "namespace", default="")), str(get(association.props, "serviceAccount", default="")))
        )
    trust = str(get(role.props, "assumeRolePolicy", default="")) if role is not None else ""
    accounts += _SERVICE_ACCOUNT_SUBJECT.findall(trust)
    by_namespace = {("tenant", ns) for ns, _ in accounts if ns in tenants}
    by_namespace |= {
        ("mirror", sa.removeprefix(TENANT_DATA["mirrorServiceAccountPrefix"])) for ns, sa in accounts if ns == mirror
    }
    tags = dict(get(role.props, "tags", default={}) or {}) if role is not None else {}
    by_tag = {("tenant", str(tags[TENANT_DATA["tenantTag"]]))} if TENANT_DATA["tenantTag"] in tags else set()
    by_tag |= {("mirror", str(tags[TENANT_DATA["weightMirrorTag"]]))} if TENANT_DATA["weightMirrorTag"] in tags else set()
    if any("*" in ns or "*" in sa or "?" in ns or "?" in sa for ns, sa in accounts):
        return (sorted(by_namespace | by_tag) or [("tenant", "?")])[0], "its trust policy names service accounts by wildcard"
    if len(by_namespace) > 1:
        return sorted(by_namespace)[0], f"it is assumed from several tenants' workloads ({sorted(by_namespace)})"
    if by_namespace and by_tag and by_tag != by_namespace:
        return sorted(by_namespace)[0], f"it is tagged {sorted(by_tag)[0]} but assumed by {sorted(by_namespace)[0]}"
    if len(by_tag) > 1:
        return sorted(by_tag)[0], "it is tagged for two owners"
    found = by_namespace or by_tag
    return (next(iter(found)) if found else None), None


def _identity_of(resource: Any) -> tuple[str, str]:
    """Which workload identity a role, its inline policy or its association belongs to: the program's WorkloadIdentity
    `<name>` creates `<name>-role`, `<name>-policy` and `<name>-association` beside each other (components/
    workload_identity.py), so they share their URN's parent chain and that stem, whether or not the analyzer was sent
    the component itself."""
    chain = resource.urn.rsplit("::", 1)[0].rsplit("$", 1)[0]
    stem = resource.name
    for suffix in ("-role", "-policy", "-association"):
        stem = stem.removesuffix(suffix)
    return chain, stem


def _role_policies(args: Any) -> list[_RolePolicy]:
    """Each inline role policy with its owner; a policy with no role beside it has no owner anyone can tell."""
    tenants = _tenant_namespaces(args)
    roles = {_identity_of(r): r for r in of_type(args, ROLE)}
    associations = {_identity_of(a): a for a in of_type(args, POD_IDENTITY_ASSOCIATION)}
    found = []
    for policy in of_type(args, ROLE_POLICY):
        parent = _identity_of(policy)
        role = roles.get(parent)
        if role is None:
            found.append(_RolePolicy(policy, None, ("tenant", "?"), "no role beside it tells whose it is"))
            continue
        owner, problem = _owner(role, associations.get(parent), tenants)
        found.append(_RolePolicy(policy, role, owner, problem))
    return found


def _mirror_bucket(policies: list[_RolePolicy], report_violation: Report) -> str | None:
    """The weight mirror's bucket: the one bucket its roles write (one per tenant, each under its own folder)."""
    buckets = {
        _s3_parts(location)[0]
        for p in policies
        if p.owner is not None and p.owner[0] == "mirror"
        for statement in p.statements or []
        for location in _granted_locations(statement)
        if location is not None
    }
    if len(buckets) > 1:
        report_violation(f"the weight mirror's roles reach several buckets ({', '.join(sorted(buckets))}): it writes one")
    return min(buckets) if buckets else None


# What a ServiceEntry of a tenant's may name: S3's endpoints (a bucket's virtual host, or the
# path-style host) and Hugging Face's hosts.
EGRESS_HOSTS = (
    re.compile(r"([a-z0-9][a-z0-9.-]{1,62}\.)?s3(\.[a-z]{2}(-[a-z]+)+-[0-9])?\.amazonaws\.com"),
    re.compile(r"(\*\.)?(huggingface\.co|hf\.co)"),
)
# A bucket's virtual host on S3's regional or global endpoint.
S3_VIRTUAL_HOST = re.compile(r"([a-z0-9][a-z0-9.-]{1,62})\.s3(?:\.[a-z]{2}(?:-[a-z]+)+-[0-9])?\.amazonaws\.com")
# Resolved by the sidecar itself, so it connects where the matched host resolves, not where the
# caller pointed it (resolution NONE, STATIC with endpoints or addresses would).
SIDECAR_RESOLUTIONS = ("DNS", "DYNAMIC_DNS")
# The EKS Pod Identity Agent's addresses: a server reading S3 under REGISTRY_ONLY sends its
# credentials call around the sidecar, which no Service names (components/specs/pod.py); a test holds
# them to the program's.
POD_IDENTITY_AGENT = ("169.254.170.23/32", "fd00:ec2::23/128")
EXCLUDE_OUTBOUND_ANNOTATION = "traffic.sidecar.istio.io/excludeOutboundIPRanges"
# The init container that downloads Hugging Face adapters: `python3 -c <script>` and (repository, revision, path)
# triples (components/specs/pod.py adapter_fetch_containers).
ADAPTER_FETCHER = "fetch-adapters"
# The batch runner's environment variable naming a Hugging Face dataset input (components/specs/batch_job.py).
BATCH_INPUT_HF_REPO = "BATCH_INPUT_HF_REPO"
# Pod annotations that take traffic away from the sidecar (istio 1.30.3 files/injection-template.yaml).
CAPTURE_ANNOTATIONS = (
    "traffic.sidecar.istio.io/includeOutboundIPRanges",
    "traffic.sidecar.istio.io/excludeOutboundPorts",
    "traffic.sidecar.istio.io/includeOutboundPorts",
    "sidecar.istio.io/interceptionMode",
)
# Where an endpoint picker may connect by address (components/specs/tenancy.py PRIVATE_CIDRS and the Pod Identity Agent).
PICKER_EGRESS_CIDRS = tuple(FACTS["pickerEgressCidrs"])
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
# The images an endpoint picker's pods run (the program's pins, platform_facts.json).
PICKER_REPOSITORIES = frozenset(FACTS["images"]["endpointPickerRepositories"])
# The namespace label that asks Istio's injector for every pod of the namespace (istio 1.30.3
# mutatingwebhook.yaml namespace.sidecar-injector.istio.io); the program labels tenant namespaces with it.
NAMESPACE_INJECTION_LABEL = "istio-injection"
# istio-iptables lets the proxy's own user and group out unredirected (`-u 1337`, the template's `-g`).
PROXY_ID = 1337


def _strings(value: Any) -> Iterator[str]:
    """Every string in a value as the analyzer hands it over (its read-only mapping and list proxies)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif is_list(value):
        for item in value:
            yield from _strings(item)


def _pod_containers(template: Mapping[str, Any]) -> list[Any]:
    """Every container of a pod template, init containers included (istio-proxy runs before them as a
    native sidecar on 1.33 nodes, so they too are held to its policy)."""
    return list(containers(get(template, "spec", default={}) or {}))


def _hugging_face_reads(container: Mapping[str, Any]) -> list[str]:
    """What a container downloads from Hugging Face: the model `vllm serve` (the servers) or `--model` (the batch
    runner's `vllm run-batch`) names when it is not an S3 or local path, a batch job's input dataset, and the
    adapters the adapter fetcher downloads."""
    words = [str(w) for w in [*(get(container, "command", default=[]) or []), *(get(container, "args", default=[]) or [])]]
    models = []
    if get(container, "name") == "vllm":
        models.append(words[words.index("serve") + 1] if "serve" in words[:-1] else (words[0] if words else ""))
    models += [words[i + 1] for i, word in enumerate(words[:-1]) if word == "--model"]
    if get(container, "name") == ADAPTER_FETCHER and words[:2] == ["python3", "-c"]:
        models += words[3::3]  # its (repository, revision, path) triples
    models += [str(get(e, "value")) for e in get(container, "env", default=[]) or [] if get(e, "name") == BATCH_INPUT_HF_REPO]
    return [model for model in models if model and not model.startswith(("s3://", "/", "-"))]


def _unreachable(template: Mapping[str, Any], hosts: set[str]) -> list[str]:
    """What a workload's containers read that its namespace's ServiceEntries do not name: each S3 bucket (by
    either virtual-hosted name), Hugging Face for a model or dataset that is not an S3 or local path, and the Pod
    Identity Agent where it reads S3."""
    missing = []
    buckets = sorted(set(re.findall(r"s3://([a-z0-9][a-z0-9.-]*)/", "\n".join(_strings(_pod_containers(template))))))
    for bucket in buckets:
        if not any(host.startswith(f"{bucket}.s3.") for host in hosts):
            missing.append(f"s3://{bucket}")
    for container in _pod_containers(template):
        for model in _hugging_face_reads(container):
            if "huggingface.co" not in hosts:
                missing.append(f"Hugging Face ({model})")
    excluded = str(get(template, "metadata", "annotations", EXCLUDE_OUTBOUND_ANNOTATION, default="")).split(",")
    if buckets and POD_IDENTITY_AGENT[0] not in excluded:
        missing.append(f"the Pod Identity Agent ({EXCLUDE_OUTBOUND_ANNOTATION} lacks {POD_IDENTITY_AGENT[0]})")
    return missing


def _around_the_sidecar(template: Mapping[str, Any]) -> list[str]:
    """What lets a model server's traffic past its sidecar: capture annotations, exclusions beyond the Pod
    Identity Agent, a container running as the proxy's user or group, or one merged into the sidecar that states
    more than its size (kube.is_sidecar_stub)."""
    annotations = get(template, "metadata", "annotations", default={}) or {}
    found = [f"{key}: {annotations[key]}" for key in CAPTURE_ANNOTATIONS if key in annotations and annotations[key] != "*"]
    excluded = [r.strip() for r in str(annotations.get(EXCLUDE_OUTBOUND_ANNOTATION, "")).split(",") if r.strip()]
    found += [f"{EXCLUDE_OUTBOUND_ANNOTATION} {r}" for r in excluded if r not in POD_IDENTITY_AGENT]
    pod = get(template, "spec", "securityContext", default={}) or {}
    for container in _pod_containers(template):
        if get(container, "name") == SIDECAR_NAME and not is_sidecar_stub(container):
            found.append(f"container {SIDECAR_NAME} overrides the injected sidecar beyond its size")
            continue
        context = get(container, "securityContext", default={}) or {}
        for key in ("runAsUser", "runAsGroup"):
            if get(context, key, default=get(pod, key)) == PROXY_ID:
                found.append(f"container {get(container, 'name')} {key} {PROXY_ID}")
    return found


def _egress_of(sidecars: list[Any], labels: Mapping[str, str]) -> tuple[str, list[str]]:
    """The outbound traffic policy and egress hosts of a pod with these labels (istio 1.30.3
    pilot/pkg/model/sidecar.go: the Sidecars whose workloadSelector selects it, else the namespace's
    without one; ALLOW_ANY and every namespace, the mesh's default, without either). Several that
    disagree are reported as such."""
    selected = [s for s in sidecars if get(s.props, "spec", "workloadSelector", "labels")]
    chosen = [s for s in selected if labels_match(get(s.props, "spec", "workloadSelector", "labels"), labels)]
    chosen = chosen or [s for s in sidecars if not get(s.props, "spec", "workloadSelector", "labels")]
    modes = {str(get(s.props, "spec", "outboundTrafficPolicy", "mode", default="ALLOW_ANY")) for s in chosen}
    mode = modes.pop() if len(modes) == 1 else ("several" if modes else "ALLOW_ANY")
    hosts = [
        str(host)
        for s in chosen
        for listener in (get(s.props, "spec", "egress", default=None) or [{"hosts": ["*/*"]}])
        for host in (get(listener, "hosts", default=[]) or [])
    ]
    return mode, hosts or ["*/*"]


def tenant_egress_by_host(args: Any, report_violation: Report) -> None:
    """A tenant's workloads connect outside the cluster only to the hosts its namespace's ServiceEntries name: the
    namespace asks for the mesh's sidecar, their pods keep it, nothing taking their traffic around it; its outbound
    traffic policy there is REGISTRY_ONLY over the namespace's own registry (egress hosts `./*`); those
    ServiceEntries are the namespace's alone, TLS on 443 resolved by the sidecar, naming S3 endpoints and Hugging
    Face only, and every one a workload reads (or REGISTRY_ONLY would cut it off from its weights). Its endpoint
    pickers instead reach by address only private ones (_check_picker_egress)."""
    tenants = _tenant_namespaces(args)
    sidecars: dict[str, list[Any]] = defaultdict(list)
    for sidecar in of_type(args, ISTIO_SIDECAR):
        sidecars[namespace_of(sidecar.props)].append(sidecar)
    named: dict[str, set[str]] = defaultdict(set)
    for entry in of_type(args, SERVICE_ENTRY):
        hosts = get(entry.props, "spec", "hosts", default=[]) or []
        named[namespace_of(entry.props)] |= {str(h) for h in (hosts if is_list(hosts) else [hosts])}
    for ns in of_type(args, NAMESPACE):
        labels = get(ns.props, "metadata", "labels", default={}) or {}
        if name_of(ns.props) in tenants and labels.get(NAMESPACE_INJECTION_LABEL) != "enabled":
            report_violation(
                f"tenant namespace {name_of(ns.props)} is not labelled {NAMESPACE_INJECTION_LABEL}=enabled: its pods may "
                "run without the mesh's sidecar, so nothing limits where they connect",
                ns.urn,
            )
    network_policies: dict[str, list[Any]] = defaultdict(list)
    for policy in of_type(args, NETWORK_POLICY):
        network_policies[namespace_of(policy.props)].append(policy)
    for resource, namespace, labels, what in _tenant_workloads(args, tenants):
        if what is None:
            _check_picker_egress(resource, labels, network_policies[namespace], report_violation)
        else:
            _check_server_egress(resource, namespace, what, sidecars[namespace], named[namespace], report_violation)
    # A tenant's own data (its declared prefixes') and the weight mirror's copies: the buckets its servers read.
    mirror = _mirror_bucket(_role_policies(args), lambda *_: None)
    declared = _declared_prefixes(args)
    for entry in of_type(args, SERVICE_ENTRY):
        namespace = namespace_of(entry.props)
        if namespace in tenants:
            own = {_s3_parts(prefix)[0] for prefix in declared.get(namespace, [])} | ({mirror} if mirror else set())
            _check_service_entry(entry, own, report_violation)


def _tenant_workloads(args: Any, tenants: Collection[str]) -> Iterator[tuple[Any, str, Mapping[str, str], str | None]]:
    """(resource, namespace, its pods' labels, what it is) of every workload in a tenant's namespace: its model
    servers, its batch jobs and anything else a change puts there; None for what it is of an endpoint picker, which
    keeps ALLOW_ANY (it reads its servers by pod address, which REGISTRY_ONLY would drop) and which the namespace's
    NetworkPolicies must hold to private addresses instead."""
    servers = {id(resource): model for resource, (_, model) in model_servers(args)}
    for resource in args.resources:
        template = pod_template(resource.resource_type, resource.props)
        namespace = namespace_of(resource.props)
        if template is None or namespace not in tenants:
            continue
        labels = get(template, "metadata", "labels", default={}) or {}
        if id(resource) in servers:
            yield resource, namespace, labels, f"model {servers[id(resource)]}"
        elif _is_endpoint_picker(resource, template, labels):
            yield resource, namespace, labels, None
        else:
            yield resource, namespace, labels, resource.resource_type.rsplit(":", 1)[-1]


def _check_picker_egress(resource: Any, labels: Mapping[str, str], policies: list[Any], report_violation: Report) -> None:
    """An endpoint picker, exempt from REGISTRY_ONLY, reaches by address only the private ranges and the Pod Identity
    Agent: every egress NetworkPolicy of its namespace (`policies`) that selects its pods (they add up, so one is
    enough to let it out) names in-cluster peers by selector, or address blocks within PICKER_EGRESS_CIDRS."""
    namespace = namespace_of(resource.props)
    for policy in policies:
        spec = get(policy.props, "spec", default={}) or {}
        if "Egress" not in [str(t) for t in get(spec, "policyTypes", default=[]) or []]:
            continue
        if not selector_matches(get(spec, "podSelector", default={}), labels):
            continue
        for rule in get(spec, "egress", default=[]) or []:
            peers = get(rule, "to", default=None)
            if not peers:
                report_violation(
                    f"NetworkPolicy {namespace}/{name_of(policy.props)} lets endpoint picker {name_of(resource.props)} "
                    "connect anywhere (an egress rule without `to`)",
                    policy.urn,
                )
            for peer in peers or []:
                block = get(peer, "ipBlock", default=None)
                if block is not None and not _within(str(get(block, "cidr", default="")), PICKER_EGRESS_CIDRS):
                    report_violation(
                        f"NetworkPolicy {namespace}/{name_of(policy.props)} lets endpoint picker {name_of(resource.props)} "
                        f"reach {get(block, 'cidr')}: its pods keep ALLOW_ANY, so by address they reach only "
                        f"{', '.join(PICKER_EGRESS_CIDRS)}",
                        policy.urn,
                    )


def _within(cidr: str, allowed: Collection[str]) -> bool:
    try:
        network = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return False
    return any(
        network.version == outer.version and network.subnet_of(outer)  # type: ignore[arg-type]
        for outer in (ipaddress.ip_network(a) for a in allowed)
    )


def _is_endpoint_picker(resource: Any, template: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """An endpoint picker by its label, and only if it is a Deployment whose containers run the picker's own images
    (the EPP, its Envoy, the sidecar's stub): a label alone would let any pod out of the egress rule."""
    if labels.get(COMPONENT_LABEL) != ENDPOINT_PICKER or resource.resource_type != DEPLOYMENT:
        return False
    return all(
        is_sidecar_stub(c) or image_repository(str(get(c, "image", default=""))) in PICKER_REPOSITORIES
        for c in _pod_containers(template)
    )


def _check_server_egress(
    resource: Any, namespace: str, what: str, sidecars: list[Any], hosts: set[str], report_violation: Report
) -> None:
    template = pod_template(resource.resource_type, resource.props) or {}
    labels = get(template, "metadata", "labels", default={}) or {}
    where = f"{name_of(resource.props)} in {namespace} ({what})"
    if opts_out_of_injection_or_host_network(template):
        report_violation(f"{where} opts out of the mesh's sidecar: nothing limits where it connects", resource.urn)
        return
    bypasses = _around_the_sidecar(template)
    if bypasses:
        report_violation(f"{where}: its traffic goes around the sidecar ({'; '.join(bypasses)})", resource.urn)
    mode, egress = _egress_of(sidecars, labels)
    if mode != "REGISTRY_ONLY":
        report_violation(
            f"{where}: its sidecar's outbound traffic policy is {mode}, so it may connect anywhere HTTPS reaches; "
            "declare a Sidecar selecting it with outboundTrafficPolicy.mode REGISTRY_ONLY",
            resource.urn,
        )
        return
    others = [host for host in egress if not host.startswith("./")]
    if others:
        report_violation(
            f"{where}: its sidecar sees {', '.join(others)}, so a ServiceEntry another namespace exports would let it "
            "out; keep its egress hosts to ./*",
            resource.urn,
        )
    missing = _unreachable(template, hosts)
    if missing:
        report_violation(
            f"{where} reads {', '.join(missing)}, which no ServiceEntry of its namespace names: REGISTRY_ONLY would cut it off",
            resource.urn,
        )


def _check_service_entry(entry: Any, buckets: set[str], report_violation: Report) -> None:
    spec = get(entry.props, "spec", default={}) or {}
    where = f"ServiceEntry {namespace_of(entry.props)}/{name_of(entry.props)}"
    exported = get(spec, "exportTo")
    if not is_list(exported) or [str(to) for to in exported] != ["."]:
        report_violation(f'{where} is exported beyond its namespace: set exportTo to ["."]', entry.urn)
    ports = [
        (whole_number(get(p, "number")), str(get(p, "protocol", default=""))) for p in (get(spec, "ports", default=[]) or [])
    ]
    if ports != [(443, "TLS")]:
        report_violation(f"{where} declares ports {ports}: a tenant's servers reach outside only TLS on 443", entry.urn)
    if str(get(spec, "resolution", default="NONE")) not in SIDECAR_RESOLUTIONS:
        report_violation(
            f"{where} has resolution {get(spec, 'resolution', default='NONE')}: the sidecar would connect where the "
            f"caller points it; use {' or '.join(SIDECAR_RESOLUTIONS)}",
            entry.urn,
        )
    for key in ("addresses", "endpoints", "workloadSelector"):
        if get(spec, key):
            report_violation(f"{where} sets {key}: a tenant's ServiceEntries name hosts only", entry.urn)
    if str(get(spec, "location", default="")) != "MESH_EXTERNAL":
        report_violation(f"{where} is not MESH_EXTERNAL", entry.urn)
    hosts = get(spec, "hosts", default=[]) or []
    for host in hosts if is_list(hosts) else [hosts]:
        if not any(pattern.fullmatch(str(host)) for pattern in EGRESS_HOSTS):
            report_violation(f"{where} names {host!r}: a tenant's servers reach only S3 endpoints and Hugging Face", entry.urn)
        bucket = S3_VIRTUAL_HOST.fullmatch(str(host))
        if bucket is not None and bucket.group(1) not in buckets:
            report_violation(
                f"{where} names bucket {bucket.group(1)!r}, which is neither under the tenant's S3 prefixes nor the weight "
                "mirror's",
                entry.urn,
            )


def tenant_s3_scoping(args: Any, report_violation: Report) -> None:
    """Data belongs to its tenant: a tenant's roles reach only S3 under its own prefixes, and in the weight mirror only
    read its own copies; the mirror's role for a tenant writes only those; no two tenants' prefixes overlap."""
    declared = _declared_prefixes(args)
    owners = [(tenant, prefix) for tenant, prefixes in sorted(declared.items()) for prefix in prefixes]
    for index, (claimant, prefix) in enumerate(owners):
        for other, theirs in owners[index + 1 :]:
            if other != claimant and (_s3_within(prefix, theirs) or _s3_within(theirs, prefix)):
                report_violation(f"tenant {claimant!r}'s S3 prefix {prefix} overlaps tenant {other!r}'s {theirs}")
    policies = _role_policies(args)
    mirror = _mirror_bucket(policies, report_violation)
    governed = {_identity_of(p.role)[0] for p in policies if p.owner is not None and p.role is not None}
    for kind in ATTACHED_POLICIES:
        for attached in of_type(args, kind):
            if _identity_of(attached)[0] in governed:
                report_violation(
                    f"{attached.name} attaches a policy to a tenant's or the mirror's role: only its inline policy may grant",
                    attached.urn,
                )
    for p in policies:
        if p.owner is None:
            continue  # a platform controller's role (the autoscaler's, the load balancer controller's)
        kind, owner = p.owner
        where = f"role policy {p.policy.name} ({'tenant' if kind == 'tenant' else 'weight mirror for'} {owner!r})"
        if p.problem is not None:
            report_violation(f"{where}: {p.problem}", p.policy.urn)
        if p.role is not None and (get(p.role.props, "inlinePolicies") or get(p.role.props, "managedPolicyArns")):
            report_violation(f"{where}: its role carries other policies (inlinePolicies, managedPolicyArns)", p.policy.urn)
        if p.statements is None:
            report_violation(f"{where}: its policy is not a policy document with statements", p.policy.urn)
            continue
        for statement in p.statements:
            if not isinstance(statement, dict) or get(statement, "Effect") == "Deny":
                continue
            if "NotResource" in statement or "NotAction" in statement:
                report_violation(f"{where}: NotResource or NotAction grants all but what it names", p.policy.urn)
                continue
            actions = {str(a) for a in _as_list(get(statement, "Action", default=[]))}
            for location in _granted_locations(statement):
                if location is None:
                    report_violation(
                        f"{where} reaches {get(statement, 'Resource')}: only S3 objects and listings under a key prefix, "
                        "with at most a trailing /*",
                        p.policy.urn,
                    )
                    continue
                bucket = _s3_parts(location)[0]
                if bucket == mirror or kind == "mirror":
                    own_copies = mirror is not None and _s3_within(location, f"s3://{mirror}/{owner}")
                    if not own_copies or (kind == "tenant" and not actions <= READ_ACTIONS):
                        report_violation(
                            f"{where} reaches {location} with {', '.join(sorted(actions))}: in the weight mirror's bucket "
                            f"a tenant's servers only read its copies under s3://{mirror}/{owner}/, which only the mirror "
                            "writes",
                            p.policy.urn,
                        )
                elif not any(_s3_within(location, prefix) for prefix in declared.get(owner, [])):
                    report_violation(
                        f"{where} reaches {location}, which is not under the tenant's S3 prefixes "
                        f"({', '.join(declared.get(owner, [])) or 'none'}): a tenant's workloads reach only its own data",
                        p.policy.urn,
                    )
