"""Istio objects for model traffic (pure functions).

Per model, one VirtualService on the platform Gateway, its routes in this order:
  1. override: `<overrideHeader>: <version>` always reaches that version (only principals the
     config names may send the header: the gateway's AuthorizationPolicy refuses the others);
  2. sticky: the gateway filter's bucket header (0..99, from the token's user) picks a version
     by RE2 ranges generated from the canary weight, so a user always sees the same version;
  3. weighted: requests without a user split by the canary weight (weights add up to 100).
Each route is per tier (the filter sets the tier header from the caller's token), and every
destination is a per-version, per-tier subset (named by the model's backend: `<version>-<tier>` on the model's
own rule, prefixed with the model on a shared one) whose connection pool bounds pending requests, so overload answers
503 at once instead of queueing without end. A request for a tier the model does not serve
gets a direct 403 saying which tiers it serves.

Deployment-served models are reached through their Service and a DestinationRule with those
subsets. Knative-served models are reached, like KServe does, through Knative's local gateway
with the Host header of the version's Knative Service; their subsets live in one platform
DestinationRule for that gateway host.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from platform_config.models import AdapterVersion, ModelConfig, ModelVersion, TierPolicy, weights_location
from platform_config.release import Release, to_annotations
from platform_config.serving import route_timeout_seconds, version_weights

from ..constants import ISTIO_INGRESS_NAMESPACE, ISTIO_SYSTEM_NAMESPACE, standard_labels
from ..shapes import TIER_ORDER, RoutePlan, TierRoute
from .gateway import GATEWAY_NAME

# Retry only what never reached a server: an LLM request is not idempotent (it costs GPU time),
# and a 503 from a full pending queue must fail fast, not come back.
SAFE_RETRY_ON = "connect-failure,refused-stream"
OVERRIDE_HEADER_ANNOTATION = "inference.platform/override-header"

# --- sticky buckets as RE2 ranges ----------------------------------------------------------


def _digit_class(low: int, high: int) -> str:
    return str(low) if low == high else f"[{low}-{high}]"


def range_regex(low: int, high: int) -> str | None:
    """An RE2 pattern that fully matches the decimal numbers low..high (0 <= low <= high <= 99,
    no leading zeros); Envoy matches header regexes against the whole value."""
    if low > high:
        return None
    parts: list[str] = []
    if low <= 9:
        parts.append(_digit_class(low, min(high, 9)))
    first_tens, last_tens = max(low, 10) // 10, high // 10
    tens = first_tens
    while tens <= last_tens and high >= 10:
        start = max(low, tens * 10) % 10
        end = min(high, tens * 10 + 9) % 10
        if start == 0 and end == 9:
            # Collapse a run of whole decades: 20-49 -> [2-4][0-9]
            run_end = tens
            while run_end + 1 <= last_tens and min(high, (run_end + 1) * 10 + 9) % 10 == 9:
                run_end += 1
            parts.append(f"{_digit_class(tens, run_end)}[0-9]")
            tens = run_end + 1
        else:
            parts.append(f"{tens}{_digit_class(start, end)}")
            tens += 1
    return parts[0] if len(parts) == 1 else "(" + "|".join(parts) + ")"


def sticky_ranges(canary_weight: int) -> tuple[str | None, str | None]:
    """(canary, stable) bucket patterns: buckets below the weight go to the canary."""
    return range_regex(0, canary_weight - 1), range_regex(canary_weight, 99)


# --- the VirtualService ----------------------------------------------------------------------


def _served_weights(versions: Sequence[ModelVersion | AdapterVersion], name: str) -> str | None:
    return next((weights_location(v.source) for v in versions if v.name == name), None)


def model_release(model: ModelConfig) -> Release:
    """The model's release as its route and the `canaryReleases` output record it (platform_config/release.py): its
    versions and canary weight, the configured steps, the weights each version serves, the reason of its step override,
    and the release of each of its adapters that has revisions (through the model's steps, under its override)."""
    release = model.release
    steps, override = tuple(release.steps), None if release.step_override is None else release.step_override.reason
    adapters = {
        adapter.name: Release(
            adapter.release.stable,
            adapter.release.canary,
            adapter.release.canary_weight,
            steps,
            _served_weights(adapter.versions or [], adapter.release.stable),
            None if adapter.release.canary is None else _served_weights(adapter.versions or [], adapter.release.canary),
            override,
        )
        for adapter in model.adapters
        if adapter.release is not None
    }
    return Release(
        release.stable,
        release.canary,
        release.canary_weight,
        steps,
        _served_weights(model.versions, release.stable),
        None if release.canary is None else _served_weights(model.versions, release.canary),
        override,
        adapters,
    )


def _match(route: RoutePlan, tier: str, extra: dict[str, dict[str, str]] | None = None) -> list[dict[str, Any]]:
    """One match per OpenAI name the route takes (any of them matches): the model's, then each of its
    LoRA adapters', which the servers of every tier it routes hold (a batch model's too)."""
    traffic, model = route.traffic, route.model
    return [
        {"headers": {traffic.model_header: {"exact": name}, traffic.tier_header: {"exact": tier}, **(extra or {})}}
        for name in route_names(model)
    ]


def route_names(model: ModelConfig) -> list[str]:
    """The OpenAI names a model's route takes: its own, then its adapters'."""
    return [model.openai_name, *(a.name for a in model.adapters)]


def _route_policy(policy: TierPolicy) -> dict[str, Any]:
    out: dict[str, Any] = {"timeout": policy.timeout}
    if policy.retry_attempts:
        per_try = f"{route_timeout_seconds(policy)}s"
        out["retries"] = {"attempts": policy.retry_attempts, "perTryTimeout": per_try, "retryOn": SAFE_RETRY_ON}
    else:
        # Istio retries by default (503s included); say explicitly that this tier does not.
        out["retries"] = {"attempts": 0}
    return out


def virtual_service(route: RoutePlan) -> dict[str, Any]:
    """The model's routes at the gateway, first match wins: every tier's version overrides, then
    its canary's sticky buckets, then its weighted split (a tier another model serves goes there
    whole), and for a model that serves fewer than every tier a 403 naming the ones it serves."""
    traffic, model = route.traffic, route.model
    release = model.release
    tiers = [t.tier for t in route.tiers]
    overrides: list[dict[str, Any]] = []
    sticky: list[dict[str, Any]] = []
    weighted: list[dict[str, Any]] = []
    for tier_route in route.tiers:
        tier_overrides, tier_sticky, tier_weighted = _tier_routes(route, tier_route)
        overrides += tier_overrides
        sticky += tier_sticky
        weighted += tier_weighted
    routes = overrides + sticky + weighted
    if set(tiers) != set(TIER_ORDER):
        routes.append(_tier_not_served(route, tiers))
    return {
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {
            "name": model.name,
            "namespace": model.tenant,
            "labels": standard_labels(model.name, "routing"),
            # Tell the policy pack which header marks this model's version-override routes, and
            # the release it holds to the previous one.
            "annotations": {OVERRIDE_HEADER_ANNOTATION: release.override_header, **to_annotations(model_release(model))},
        },
        "spec": {"hosts": list(traffic.hosts), "gateways": [f"{ISTIO_INGRESS_NAMESPACE}/{GATEWAY_NAME}"], "http": routes},
    }


def _tier_routes(
    route: RoutePlan, tier_route: TierRoute
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """One tier's routes: (version overrides, the canary's sticky buckets, the weighted split)."""
    traffic, model = route.traffic, route.model
    release = model.release
    tier, owner = tier_route.tier, tier_route.owner
    policy = _route_policy(tier_route.policy)
    if owner is not model:
        # Batch work goes to its own pool, whatever version header or user key it carries.
        to_owner = {
            "name": f"{tier}-to-{owner.name}",
            "match": _match(route, tier),
            "route": [tier_route.owner_backend.destination(owner, owner.release.stable, tier).route()],
            **policy,
        }
        return [], [], [to_owner]
    overrides = [
        {
            "name": f"{tier}-override-{version}",
            "match": _match(route, tier, {release.override_header: {"exact": version}}),
            "route": [route.backend.destination(model, version, tier).route()],
            **policy,
        }
        for version in route.versions
    ]
    sticky = []
    canary = release.canary
    if canary is not None:
        canary_range, stable_range = sticky_ranges(release.canary_weight)
        for version, pattern in ((canary, canary_range), (release.stable, stable_range)):
            if pattern is not None:
                sticky.append(
                    {
                        "name": f"{tier}-sticky-{version}",
                        "match": _match(route, tier, {traffic.bucket_header: {"regex": pattern}}),
                        "route": [route.backend.destination(model, version, tier).route()],
                        **policy,
                    }
                )
    weighted = {
        "name": f"{tier}-weighted",
        "match": _match(route, tier),
        "route": [
            route.backend.destination(model, version, tier).route(weight) for version, weight in version_weights(model).items()
        ],
        **policy,
    }
    return overrides, sticky, [weighted]


def _tier_not_served(route: RoutePlan, tiers: Sequence[str]) -> dict[str, Any]:
    """A request for one of the model's names on a tier it does not serve: 403, naming the tiers it serves."""
    traffic, model = route.traffic, route.model
    return {
        "name": "tier-not-served",
        "match": [{"headers": {traffic.model_header: {"exact": name}}} for name in route_names(model)],
        "directResponse": {
            "status": 403,
            # The tier is the token's (the filter sets the tier header from its claim).
            "body": {
                "string": f"model {model.openai_name}{' (and its adapters)' if model.adapters else ''} serves tiers "
                f"{', '.join(tiers)}; the token's "
                f"{traffic.authentication.tier_claim} claim names another"
            },
        },
    }


# --- DestinationRules ------------------------------------------------------------------------


def tier_traffic_policy(policy: TierPolicy, *, eject_hosts: bool = True) -> dict[str, Any]:
    """Connection-pool bounds per tier, and (`eject_hosts`) outlier detection.

    Outlier detection ejects replicas that fail (connection failures, 502/503/504 from the
    server), not ones that are merely slow: local timeouts are counted apart from server
    errors. `consecutive5xxErrors` is set to 0: unset, Envoy counts any 5 consecutive 5xx (its
    default, which Istio keeps) and ejects before `consecutiveGatewayErrors` could matter
    (istio/api networking/v1alpha3/destination_rule.proto, OutlierDetection: "consecutive
    gateway errors ... have no effect if consecutive5xxErrors is set to the same or a lower
    value"). Hosts behind Knative's local gateway are gateway pods, not model servers: a
    model's 5xx would eject a healthy gateway, so those subsets get no outlier detection."""
    traffic_policy: dict[str, Any] = {
        "connectionPool": {
            "tcp": {"maxConnections": policy.max_requests},
            "http": {
                # Beyond these the gateway answers 503 at once (Envoy circuit breaker).
                "http1MaxPendingRequests": policy.max_pending_requests,
                "http2MaxRequests": policy.max_requests,
                "maxRetries": max(1, policy.retry_attempts * 8),
            },
        },
    }
    if eject_hosts:
        traffic_policy["outlierDetection"] = {
            "splitExternalLocalOriginErrors": True,
            "consecutiveLocalOriginFailures": 5,
            "consecutive5xxErrors": 0,
            "consecutiveGatewayErrors": 5,
            "interval": "10s",
            "baseEjectionTime": "30s",
            "maxEjectionPercent": 50,
        }
    return traffic_policy


def _subsets(route: RoutePlan, versions: tuple[str, ...], eject_hosts: bool) -> list[dict[str, Any]]:
    model, backend = route.model, route.backend
    return [
        {
            "name": backend.subset_name(model, version, tier),
            "labels": backend.subset_labels(model, version),
            "trafficPolicy": tier_traffic_policy(policy, eject_hosts=eject_hosts),
        }
        for version in versions
        for tier, policy in route.subsets
    ]


def destination_rules(route: RoutePlan) -> list[dict[str, Any]]:
    """The model's own rules, as its backend groups them: one subset per version and tier."""
    model = route.model
    return [
        {
            "apiVersion": "networking.istio.io/v1",
            "kind": "DestinationRule",
            "metadata": {"name": rule.name, "namespace": model.tenant, "labels": standard_labels(rule.name, "routing")},
            "spec": {"host": rule.host, "subsets": _subsets(route, rule.versions, rule.eject_hosts)},
        }
        for rule in route.backend.destination_rules(model, route.versions)
    ]


def shared_destination_rules(routes: tuple[RoutePlan, ...]) -> dict[str, dict[str, Any]]:
    """Per shared rule (keyed by its resource suffix): the subsets of every model whose backend
    puts its versions behind a shared gateway, on the one host they are all reached through.
    Grouped by the rule, not by the backend, so a backend built on another one shares its rule
    instead of declaring it twice."""
    grouped: dict[tuple[str, str], list[RoutePlan]] = {}
    for route in routes:
        if (shared := route.backend.shared_rule(route.model)) is not None:
            grouped.setdefault(shared, []).append(route)
    return {
        suffix: {
            "apiVersion": "networking.istio.io/v1",
            "kind": "DestinationRule",
            "metadata": {"name": name, "namespace": ISTIO_SYSTEM_NAMESPACE, "labels": standard_labels(name, "routing")},
            "spec": {
                "host": mine[0].backend.destination_rule_host(mine[0].model),
                **({"trafficPolicy": dict(policy)} if (policy := mine[0].backend.shared_traffic_policy) else {}),
                "subsets": [s for r in mine for s in _subsets(r, r.versions, r.backend.subsets_are_servers)],
            },
        }
        for (name, suffix), mine in grouped.items()
    }
