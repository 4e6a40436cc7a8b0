"""What an endpoint picker's plan may ask, and what follows from it: the checks a plan must pass
(`check_plan`), the pods' sizes its queued bytes are held to, its bands in priority order, and the
queue TTL, route timeout, preStop sleep and grace period derived from its bands. LR, SA and IS name
the upstream sources the package's docstring cites."""

from __future__ import annotations

from decimal import Decimal

from platform_config.quantity import binary_quantity, parse_quantity

from ...picker_plan import EndpointPickerPlan, PickerBand
from .names import EPP_CONTAINER, MAX_NAME_LENGTH, PROXY_CONTAINER

TIERS = ("premium", "standard", "batch")

# How long the EPP keeps accepting new ext_proc streams after SIGTERM while the Service drops it
# (LR options.go --drain-timeout, DefaultDrainTimeout 30s); in-flight streams then finish
# (internal/runnable/grpc.go GracefulStop).
DRAIN_SECONDS = 30
# Time for the kubelet to kill what is left after the preStop sleep.
GRACE_MARGIN_SECONDS = 15

# Resources per container, as ResourceQuota counts them (so tenant quotas count EPP pods; the
# injected sidecar adds MESH_PROXY_RESOURCES, see pods.py pod_annotations). Sized from LR
# docs/operations.md at v0.10.0 for one model version (a few requests per second, tens of
# pods), far below the chart's 8 CPU/8Gi EPP and 4 CPU/8Gi proxy:
# - EPP: 0.5-1 core per req/s of 100k-token agentic load and idle CPU growing with pods (7.5
#   cores at 100 pods); 0.26-0.65 GiB peak at 5 req/s over 100 pods, 4-6 GiB at 50-100 req/s.
#   1 core and 2Gi requested, CPU unbounded (no CPU limit, the platform's rule) and 4Gi of memory,
#   of which at most half may be queued request bodies (flow control's maxBytes, checked below).
# - Envoy: 1.2-2 cores below 10 req/s, peak memory 1.3-1.4 GiB whatever the load, "allocate at
#   least 2 GiB": 1 core and 1Gi requested, a 2Gi limit. Its workers are fixed at 2
#   (--concurrency) rather than the chart's --cpuset-threads, which without a CPU limit starts one
#   per node core.
EPP_POD_RESOURCES: dict[str, dict[str, str]] = {
    EPP_CONTAINER: {"requests.cpu": "1", "requests.memory": "2Gi", "limits.memory": "4Gi"},
    PROXY_CONTAINER: {"requests.cpu": "1", "requests.memory": "1Gi", "limits.memory": "2Gi"},
}
PROXY_WORKERS = 2
# Queued request bodies may take at most this share of the EPP's memory limit.
QUEUE_MEMORY_SHARE = Decimal("0.5")


# --- timeouts -------------------------------------------------------------------------------


def queue_ttl_seconds(plan: EndpointPickerPlan) -> int:
    """flowControl.defaultRequestTTL, one per EPP at v0.10.0 (LR pkg/epp/requestcontrol/admission.go:
    a request's InitialEffectiveTTL is always 0): the longest tier's bound, so the EPP never drops a
    request its tier would still let wait; the proxy times each tier's own, shorter bound."""
    return max(band.queue_seconds for band in plan.bands)


def route_timeout_seconds(plan: EndpointPickerPlan) -> int:
    """Envoy's route timeout: the queue wait plus the longest request."""
    return plan.request_timeout_seconds + queue_ttl_seconds(plan)


def proxy_pre_stop_seconds(plan: EndpointPickerPlan) -> int:
    """Envoy exits at once on SIGTERM, so it sleeps until the last request it may still have
    accepted (up to the EPP's drain window after deletion) has run its full route timeout."""
    return DRAIN_SECONDS + route_timeout_seconds(plan)


def termination_grace_seconds(plan: EndpointPickerPlan) -> int:
    # The chart fixes 130 s (routerlib _deployment.yaml); ours covers the preStop sleep.
    return proxy_pre_stop_seconds(plan) + GRACE_MARGIN_SECONDS


# --- checks ---------------------------------------------------------------------------------


def _bytes(quantity: str) -> Decimal:
    return parse_quantity(quantity)


def check_plan(plan: EndpointPickerPlan) -> None:
    """Refuse a plan the EPP or the API server would not take, naming the input."""
    if not plan.name or len(plan.name) > MAX_NAME_LENGTH:
        raise ValueError(f"name {plan.name!r}: 1 to {MAX_NAME_LENGTH} characters (EPP objects are named <name>-epp)")
    if plan.replicas < 1:
        raise ValueError(f"replicas {plan.replicas}: at least 1")
    if not plan.server_labels:
        raise ValueError("server_labels: the InferencePool needs a selector")
    if not 1 <= plan.target_port <= 65535:
        raise ValueError(f"target_port {plan.target_port}: not a port")
    service, _, domain = plan.server_host.partition(".")
    if not service or domain != f"{plan.namespace}.svc.cluster.local":
        # A Service selects pods of its own namespace only, and the DestinationRule on it is
        # seen in the EPP's namespace only (exportTo ".").
        raise ValueError(f"server_host {plan.server_host!r}: must be <service>.{plan.namespace}.svc.cluster.local")
    if plan.request_timeout_seconds < 1:
        raise ValueError(f"request_timeout_seconds {plan.request_timeout_seconds}: at least 1")
    if not plan.bands:
        raise ValueError("bands: at least one")
    tiers = [band.tier for band in plan.bands]
    priorities = [band.priority for band in plan.bands]
    for band in plan.bands:
        if band.tier not in TIERS:
            raise ValueError(f"bands: tier {band.tier!r} is not one of {', '.join(TIERS)}")
        if band.max_requests < 1:
            # "0" means the system default (5000), never zero (LR PriorityBandConfig.MaxRequests).
            raise ValueError(f"bands[{band.tier}].max_requests {band.max_requests}: at least 1")
        if _bytes(band.max_bytes) <= 0:
            raise ValueError(f"bands[{band.tier}].max_bytes {band.max_bytes!r}: more than 0")
        if band.queue_seconds < 1:
            # The EPP's TTL is the longest band's, and "0s" would disable it.
            raise ValueError(f"bands[{band.tier}].queue_seconds {band.queue_seconds}: at least 1")
    if len(set(tiers)) != len(tiers):
        raise ValueError(f"bands: tiers {tiers} repeat")
    if len(set(priorities)) != len(priorities):
        raise ValueError(f"bands: priorities {priorities} repeat (one band per priority)")
    by_tier = {band.tier: band.priority for band in plan.bands}
    ordered = [by_tier[tier] for tier in TIERS if tier in by_tier]
    if ordered != sorted(ordered, reverse=True):
        raise ValueError(f"bands: priorities {by_tier} must fall from premium to batch (higher is served first)")
    ceiling = _bytes(EPP_POD_RESOURCES[EPP_CONTAINER]["limits.memory"]) * QUEUE_MEMORY_SHARE
    if total_queue_bytes(plan) > ceiling:
        raise ValueError(
            f"bands: {binary_quantity(total_queue_bytes(plan))} of queued bytes in all; at most {binary_quantity(ceiling)}, "
            "half the EPP's memory limit (LR docs/operations.md: keep flow control's maxBytes under it)"
        )


def total_queue_bytes(plan: EndpointPickerPlan) -> Decimal:
    return sum((_bytes(band.max_bytes) for band in plan.bands), Decimal(0))


def sorted_bands(plan: EndpointPickerPlan) -> list[PickerBand]:
    """Highest priority first."""
    return sorted(plan.bands, key=lambda band: band.priority, reverse=True)
