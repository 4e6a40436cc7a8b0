"""Latency-sensitive workloads (by label, or by a route sending them a latency-sensitive tier): not on time-sliced
GPUs, kept warm, and (advisory) not on spot capacity."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterator

from .kube import (
    DEFAULT_TIER_HEADER,
    DESTINATION_RULE,
    INFERENCE_POOL,
    LATENCY_LABEL,
    VIRTUAL_SERVICE,
    Report,
    config,
    fqdn,
    get,
    labels_match,
    name_of,
    namespace_of,
    selector_matches,
)
from .label_index import LabelIndex
from .workloads import GpuWorkload, gpu_workloads, knative_scale, of_type, once_per_stack, pools


def _host_name(host: str, namespace: str) -> tuple[str, str]:
    """(namespace, name) of a Kubernetes service host: `name`, `name.ns` or `name.ns.svc...`."""
    parts = host.split(".")
    return (parts[1] if len(parts) > 1 else namespace), parts[0]


def latency_sensitive(args: Any) -> dict[str, str]:
    """Why each latency-sensitive GPU workload of the stack is one, by URN: its own label, or a route that
    sends it requests of a latency-sensitive tier (a VirtualService route matching the tier
    header, or taking any tier, to a Service or Knative service whose pods the workload runs, or
    to an endpoint picker's Service whose InferencePool selects them).
    A model that serves premium is latency-sensitive whatever its profile's label says. Found once per stack for
    the three rules that ask with the same settings (a workload's reason is its own, whichever others are asked of)."""
    settings = config(args)
    tier_header = settings.get("tierHeader", DEFAULT_TIER_HEADER)
    tiers = frozenset(settings.get("latencySensitiveTiers", ["premium"]))
    return dict(
        once_per_stack(
            args,
            ("latency-sensitive", tier_header, tiers),
            lambda: _latency_sensitive(args, gpu_workloads(args), tier_header, tiers),
        )
    )


def _latency_sensitive(args: Any, workloads: list[GpuWorkload], tier_header: str, tiers: frozenset[str]) -> dict[str, str]:
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
    # Indexed, so each destination checks only the workloads it may reach (tests/test_policy_rules_scale.py).
    by_labels = LabelIndex(workloads, lambda w: w.namespace, lambda w: w.pod_labels)
    knative = defaultdict(list)
    for w in workloads:
        if w.knative:
            knative[(w.namespace, w.name)].append(w)
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
                reached = [
                    *knative.get(target, []),
                    *(w for w in by_labels.candidates(target[0], pods) if pods and labels_match(pods, w.pod_labels)),
                    *(
                        w
                        for w in by_labels.candidates(target[0], get(pool, "matchLabels", default={}))
                        if pool is not None and selector_matches(pool, w.pod_labels)
                    ),
                ]
                for w in reached:
                    if w.resource.urn not in why:
                        why[w.resource.urn] = (
                            f"VirtualService {namespace}/{name_of(service.props)} sends it {', '.join(served)} requests"
                        )
    return why


def _latency_sensitive_on_pools(args: Any, key: str, value: str) -> Iterator[tuple[GpuWorkload, str, str]]:
    """(workload, why it is latency-sensitive, pool) for each pool whose `key` is `value` that a
    latency-sensitive workload may run on."""
    known = pools(args)
    reasons = latency_sensitive(args)
    for workload in gpu_workloads(args):
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
    reasons = latency_sensitive(args)
    for workload in (w for w in gpu_workloads(args) if w.knative):
        why = reasons.get(workload.resource.urn)
        if why is None:
            continue
        minimum = knative_scale(workload, "min-scale", 0)  # not a whole number: Knative's default, 0
        if minimum < 1:
            report_violation(
                f"{workload.label} is latency-sensitive ({why}) with min-scale {minimum}: it would cold-start a model "
                "(minutes) on the next request",
                workload.resource.urn,
            )


def latency_sensitive_on_spot(args: Any, report_violation: Report) -> None:
    for workload, why, pool in _latency_sensitive_on_pools(args, "capacityType", "SPOT"):
        report_violation(
            f"{workload.label} is latency-sensitive ({why}) on spot pool '{pool}': expect interruptions",
            workload.resource.urn,
        )
