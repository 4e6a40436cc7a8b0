"""Stack validators: rules that relate resources to each other."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping

from .kube import (
    DEFAULT_OVERRIDE_HEADER,
    DESTINATION_RULE,
    GPU_NODE_POOL,
    GPU_SHARING_LABEL,
    HPA_V2,
    KNATIVE_SERVICE,
    KNATIVE_SERVICE_LABEL,
    LATENCY_LABEL,
    MIG_PREFIX,
    MIG_PROFILES,
    OVERRIDE_HEADER_ANNOTATION,
    PDB,
    POD_MONITOR,
    POOL_LABEL,
    PRIORITY_CLASS,
    PRODUCTION_PRIORITY_CLASS,
    QUOTA,
    SERVICE_MONITOR,
    VIRTUAL_SERVICE,
    Report,
    config,
    get,
    is_gpu_resource,
    labels_match,
    name_of,
    namespace_of,
    pod_gpu_resources,
    pod_template,
)

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"


def of_type(args: Any, token: str) -> list[Any]:
    return [r for r in args.resources if r.resource_type == token]


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

    @property
    def pool(self) -> str | None:
        return get(self.spec, "nodeSelector", POOL_LABEL)


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


def latency_sensitive_not_time_sliced(args: Any, report_violation: Report) -> None:
    known = pools(args)
    for workload in gpu_workloads(args):
        if workload.labels.get(LATENCY_LABEL) != "true" or workload.pool is None:
            continue
        if get(known.get(workload.pool, {}), "sharing") == "timeSlicing":
            report_violation(
                f"{workload.namespace}/{workload.name} is latency-sensitive but runs on time-sliced pool '{workload.pool}': "
                "time-slicing gives no isolation",
                workload.resource.urn,
            )


# --- rule 3 (PDB part) -------------------------------------------------------------------------


def _max_replicas(workload: GpuWorkload, scalers: dict[tuple[str, str], int]) -> int:
    if workload.knative:
        annotations = get(workload.resource.props, "spec", "template", "metadata", "annotations", default={})
        try:
            return int(annotations.get("autoscaling.knative.dev/max-scale", "0") or 0) or 1000  # 0: unbounded
        except ValueError:
            return 1000
    return max(get(workload.resource.props, "spec", "replicas", default=1), scalers.get((workload.namespace, workload.name), 1))


def pdb_for_replicated_inference(args: Any, report_violation: Report) -> None:
    budgets: dict[str, list[Mapping[str, str]]] = defaultdict(list)
    for budget in of_type(args, PDB):
        budgets[namespace_of(budget.props)].append(get(budget.props, "spec", "selector", "matchLabels", default={}))
    scalers = {
        (namespace_of(h.props), get(h.props, "spec", "scaleTargetRef", "name")): get(h.props, "spec", "maxReplicas", default=1)
        for h in of_type(args, HPA_V2)
    }
    for workload in gpu_workloads(args):
        if workload.resource.resource_type not in (
            "kubernetes:apps/v1:Deployment",
            "kubernetes:apps/v1:StatefulSet",
            KNATIVE_SERVICE,
        ):
            continue
        replicas = _max_replicas(workload, scalers)
        if replicas <= 1:
            continue
        labels = dict(workload.labels)
        if workload.knative:
            labels[KNATIVE_SERVICE_LABEL] = workload.name
        if not any(labels_match(selector, labels) for selector in budgets[workload.namespace]):
            report_violation(
                f"{workload.namespace}/{workload.name} can run {replicas} replicas but no PodDisruptionBudget covers its pods: "
                "a node drain could take them all",
                workload.resource.urn,
            )


# --- rule 6 ------------------------------------------------------------------------------------


def _fqdn(host: str, namespace: str) -> str:
    return host if "." in host else f"{host}.{namespace}.svc.cluster.local"


def canary_routes(args: Any, report_violation: Report) -> None:
    settings = config(args)
    default_headers = set(settings.get("overrideHeaders", [DEFAULT_OVERRIDE_HEADER]))
    subsets = {
        (_fqdn(get(rule.props, "spec", "host", default=""), namespace_of(rule.props)), get(s, "name"))
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
                if subset is not None and (_fqdn(host, namespace), subset) not in subsets:
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
    quotas: dict[str, set[str]] = defaultdict(set)
    for quota in of_type(args, QUOTA):
        for key in get(quota.props, "spec", "hard", default={}):
            if key.startswith("requests."):
                quotas[namespace_of(quota.props)].add(key.removeprefix("requests."))
    classes = {name_of(c.props): c.props for c in of_type(args, PRIORITY_CLASS)}
    existing = set(classes) | set(settings.get("externalPriorityClasses", []))
    for workload in gpu_workloads(args):
        missing = sorted(r for r in workload.gpu_resources if r not in quotas.get(workload.namespace, set()))
        if missing:
            report_violation(
                f"namespace {workload.namespace} runs GPU workload {workload.name} but has no ResourceQuota on "
                f"{', '.join('requests.' + r for r in missing)}",
                workload.resource.urn,
            )
        priority = get(workload.spec, "priorityClassName")
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
        labels = dict(workload.labels)
        if workload.knative:
            labels[KNATIVE_SERVICE_LABEL] = workload.name
        if not any(labels_match(selector, labels) for selector in scraped[workload.namespace]):
            report_violation(
                f"{workload.namespace}/{workload.name} serves a model but nothing scrapes its metrics (no ServiceMonitor or "
                "PodMonitor)",
                workload.resource.urn,
            )


def latency_sensitive_on_spot(args: Any, report_violation: Report) -> None:
    known = pools(args)
    for workload in gpu_workloads(args):
        if workload.labels.get(LATENCY_LABEL) == "true" and get(known.get(workload.pool or "", {}), "capacityType") == "SPOT":
            report_violation(
                f"{workload.namespace}/{workload.name} is latency-sensitive on spot pool '{workload.pool}': expect interruptions",
                workload.resource.urn,
            )
