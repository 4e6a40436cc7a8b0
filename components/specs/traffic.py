"""Istio objects for model traffic (pure functions).

Per model, one VirtualService on the platform Gateway, its routes in this order:
  1. override: `<overrideHeader>: <version>` always reaches that version;
  2. sticky: the gateway filter's bucket header (0..99, from the user key) picks a version by
     RE2 ranges generated from the canary weight, so a user always sees the same version;
  3. weighted: requests without a user key split by the canary weight (weights add up to 100).
Each route is per tier (the filter normalises the tier header), and every destination is a
`<version>-<tier>` subset whose connection pool bounds pending requests, so overload answers
503 at once instead of queueing without end. A request for a tier the model does not serve
gets a direct 403 saying which tiers it serves.

Deployment-served models are reached through their Service and a DestinationRule with those
subsets. Knative-served models are reached, like KServe does, through Knative's local gateway
with the Host header of the version's Knative Service; their subsets live in one platform
DestinationRule for that gateway host.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from platform_config.models import ModelConfig, PlatformConfig, TierPolicy, duration_seconds
from platform_config.profiles import TierName
from platform_config.serving import model_tiers, running_versions

from ..backends import ServingBackend
from ..constants import GATEWAY_SELECTOR, ISTIO_INGRESS_NAMESPACE, ISTIO_SYSTEM_NAMESPACE, standard_labels
from ..plan import backend_of

GATEWAY_NAME = "inference-gateway"
TIER_ORDER: tuple[TierName, ...] = ("premium", "standard", "batch")
LUA_SOURCE = Path(__file__).resolve().parent.parent / "lua" / "gateway_filter.lua"
# Retry only what never reached a server: an LLM request is not idempotent (it costs GPU time),
# and a 503 from a full pending queue must fail fast, not come back.
SAFE_RETRY_ON = "connect-failure,refused-stream"
OVERRIDE_HEADER_ANNOTATION = "inference.platform/override-header"
HCM = "envoy.filters.network.http_connection_manager"
HCM_TYPE = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"


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


# --- destinations ----------------------------------------------------------------------------


def find_model(config: PlatformConfig, name: str) -> ModelConfig:
    return next(m for m in config.models if m.name == name)


def served_tiers(config: PlatformConfig, model: ModelConfig) -> list[TierName]:
    """Tiers requests for this model may use: its own, plus batch when sent to a batch model."""
    tiers: set[TierName] = set(model_tiers(config, model))
    if model.batch_model is not None:
        tiers.add("batch")
    return [t for t in TIER_ORDER if t in tiers]


def tier_owner(config: PlatformConfig, model: ModelConfig, tier: str) -> ModelConfig:
    """The model whose servers take this tier's requests for `model`."""
    if tier == "batch" and model.batch_model is not None:
        return find_model(config, model.batch_model)
    return model


def priority_tiers(config: PlatformConfig, model: ModelConfig) -> list[TierName]:
    """Tiers whose destination server runs vLLM's priority scheduling (serves several tiers)."""
    return [t for t in served_tiers(config, model) if len(model_tiers(config, tier_owner(config, model, t))) > 1]


# --- the VirtualService ----------------------------------------------------------------------


def _match(config: PlatformConfig, model: ModelConfig, tier: str, **extra: dict[str, str]) -> list[dict[str, Any]]:
    traffic = config.traffic
    headers = {traffic.model_header: {"exact": model.openai_name}, traffic.tier_header: {"exact": tier}, **extra}
    return [{"headers": headers}]


def _route_policy(policy: TierPolicy) -> dict[str, Any]:
    out: dict[str, Any] = {"timeout": policy.timeout}
    if policy.retry_attempts:
        per_try = f"{round(duration_seconds(policy.timeout) * 1000)}ms"
        out["retries"] = {"attempts": policy.retry_attempts, "perTryTimeout": per_try, "retryOn": SAFE_RETRY_ON}
    else:
        # Istio retries by default (503s included); say explicitly that this tier does not.
        out["retries"] = {"attempts": 0}
    return out


def virtual_service(config: PlatformConfig, model: ModelConfig) -> dict[str, Any]:
    traffic = config.traffic
    release = model.release
    tiers = served_tiers(config, model)
    overrides, sticky, weighted = [], [], []
    for tier in tiers:
        owner = tier_owner(config, model, tier)
        policy = _route_policy(traffic.tiers[tier])
        if owner is not model:
            # Batch work goes to its own pool, whatever version header or user key it carries.
            weighted.append(
                {
                    "name": f"{tier}-to-{owner.name}",
                    "match": _match(config, model, tier),
                    "route": [backend_of(owner).destination(owner, owner.release.stable, tier).route()],
                    **policy,
                }
            )
            continue
        for version in running_versions(model):
            overrides.append(
                {
                    "name": f"{tier}-override-{version}",
                    "match": _match(config, model, tier, **{release.override_header: {"exact": version}}),
                    "route": [backend_of(model).destination(model, version, tier).route()],
                    **policy,
                }
            )
        canary = release.canary
        if canary is not None:
            canary_range, stable_range = sticky_ranges(release.canary_weight)
            for version, pattern in ((canary, canary_range), (release.stable, stable_range)):
                if pattern is not None:
                    sticky.append(
                        {
                            "name": f"{tier}-sticky-{version}",
                            "match": _match(config, model, tier, **{traffic.bucket_header: {"regex": pattern}}),
                            "route": [backend_of(model).destination(model, version, tier).route()],
                            **policy,
                        }
                    )
            split = [(release.stable, 100 - release.canary_weight), (canary, release.canary_weight)]
        else:
            split = [(release.stable, 100)]
        weighted.append(
            {
                "name": f"{tier}-weighted",
                "match": _match(config, model, tier),
                "route": [backend_of(model).destination(model, version, tier).route(weight) for version, weight in split],
                **policy,
            }
        )
    routes = overrides + sticky + weighted
    if set(tiers) != set(TIER_ORDER):
        routes.append(
            {
                "name": "tier-not-served",
                "match": [{"headers": {traffic.model_header: {"exact": model.openai_name}}}],
                "directResponse": {
                    "status": 403,
                    "body": {
                        "string": f"model {model.openai_name} serves tiers {', '.join(tiers)}; set the {traffic.tier_header} "
                        "header"
                    },
                },
            }
        )
    return {
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {
            "name": model.name,
            "namespace": model.tenant,
            "labels": standard_labels(model.name, "routing"),
            # Tells the policy pack which header marks this model's version-override routes.
            "annotations": {OVERRIDE_HEADER_ANNOTATION: release.override_header},
        },
        "spec": {"hosts": list(traffic.hosts), "gateways": [f"{ISTIO_INGRESS_NAMESPACE}/{GATEWAY_NAME}"], "http": routes},
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


def _subsets(config: PlatformConfig, model: ModelConfig) -> list[dict[str, Any]]:
    backend = backend_of(model)
    subsets = []
    for version in running_versions(model):
        for tier in TIER_ORDER:
            if not _serves(config, model, tier):
                continue
            subsets.append(
                {
                    "name": backend.subset_name(model, version, tier),
                    "labels": backend.subset_labels(model, version),
                    "trafficPolicy": tier_traffic_policy(config.traffic.tiers[tier], eject_hosts=backend.subsets_are_servers),
                }
            )
    return subsets


def _serves(config: PlatformConfig, model: ModelConfig, tier: str) -> bool:
    """Whether `model`'s own servers take `tier` (for itself or as another model's batch model)."""
    if tier in model_tiers(config, model) and not (tier == "batch" and model.batch_model is not None):
        return True
    return tier == "batch" and any(m.batch_model == model.name for m in config.models)


def destination_rule(config: PlatformConfig, model: ModelConfig) -> dict[str, Any]:
    """One subset per version and tier, on the model's own rule."""
    return {
        "apiVersion": "networking.istio.io/v1",
        "kind": "DestinationRule",
        "metadata": {"name": model.name, "namespace": model.tenant, "labels": standard_labels(model.name, "routing")},
        "spec": {"host": backend_of(model).destination_rule_host(model), "subsets": _subsets(config, model)},
    }


def shared_destination_rule(config: PlatformConfig, backend: ServingBackend) -> dict[str, Any] | None:
    """The subsets of every model of a backend whose versions sit behind a shared gateway, on
    the one host they are all reached through."""
    models = [m for m in config.models if backend_of(m) is backend]
    if backend.shared_destination_rule is None or not models:
        return None
    name, _ = backend.shared_destination_rule
    return {
        "apiVersion": "networking.istio.io/v1",
        "kind": "DestinationRule",
        "metadata": {"name": name, "namespace": ISTIO_SYSTEM_NAMESPACE, "labels": standard_labels(name, "routing")},
        "spec": {"host": backend.destination_rule_host(models[0]), "subsets": [s for m in models for s in _subsets(config, m)]},
    }


# --- the Gateway and its filter --------------------------------------------------------------


def gateway(config: PlatformConfig) -> dict[str, Any]:
    traffic = config.traffic
    servers: list[dict[str, Any]] = []
    if traffic.tls_credential_name:
        servers.append(
            {
                "port": {"number": 443, "name": "https", "protocol": "HTTPS"},
                "hosts": list(traffic.hosts),
                "tls": {"mode": "SIMPLE", "credentialName": traffic.tls_credential_name},
            }
        )
        servers.append(
            {
                "port": {"number": 80, "name": "http", "protocol": "HTTP"},
                "hosts": list(traffic.hosts),
                "tls": {"httpsRedirect": True},
            }
        )
    else:
        servers.append({"port": {"number": 80, "name": "http", "protocol": "HTTP"}, "hosts": list(traffic.hosts)})
    return {
        "apiVersion": "networking.istio.io/v1",
        "kind": "Gateway",
        "metadata": {
            "name": GATEWAY_NAME,
            "namespace": ISTIO_INGRESS_NAMESPACE,
            "labels": standard_labels(GATEWAY_NAME, "gateway"),
        },
        "spec": {"selector": GATEWAY_SELECTOR, "servers": servers},
    }


def filter_config(config: PlatformConfig) -> dict[str, Any]:
    traffic = config.traffic
    return {
        "tier_header": traffic.tier_header,
        "default_tier": traffic.default_tier,
        "bucket_header": traffic.bucket_header,
        "model_header": traffic.model_header,
        "default_user_header": "x-user-id",
        "priorities": {tier: traffic.tiers[tier].vllm_priority for tier in TIER_ORDER},
        "models": {
            m.openai_name: {
                "user_key_header": m.release.user_key_header,
                "priority_tiers": {tier: True for tier in priority_tiers(config, m)},
            }
            for m in config.models
        },
    }


def _lua_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid Lua string literal for these values
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{" + ", ".join(f"[{json.dumps(str(k))}] = {_lua_literal(v)}" for k, v in sorted(value.items())) + "}"
    raise TypeError(f"no Lua literal for {value!r}")


def lua_code(config: PlatformConfig) -> str:
    """The filter's inline code: the generated CONFIG, then the filter source unchanged."""
    return f"local CONFIG = {_lua_literal(filter_config(config))}\n\n{LUA_SOURCE.read_text()}"


def stream_idle_timeout_seconds(config: PlatformConfig) -> int:
    """A response may be silent (not streamed) for up to the longest tier timeout; Envoy's
    default stream idle timeout (300 s) would cut it earlier."""
    return max(math.ceil(duration_seconds(t.timeout)) for t in config.traffic.tiers.values()) + 30


def envoy_filter(config: PlatformConfig) -> dict[str, Any]:
    gateway_listener = {"context": "GATEWAY"}
    return {
        "apiVersion": "networking.istio.io/v1alpha3",
        "kind": "EnvoyFilter",
        "metadata": {
            "name": "inference-gateway-filter",
            "namespace": ISTIO_INGRESS_NAMESPACE,
            "labels": standard_labels("inference-gateway-filter", "gateway"),
        },
        "spec": {
            "workloadSelector": {"labels": GATEWAY_SELECTOR},
            "configPatches": [
                {
                    # The filter buffers request bodies to read them: allow the largest one.
                    "applyTo": "LISTENER",
                    "match": gateway_listener,
                    "patch": {
                        "operation": "MERGE",
                        "value": {"per_connection_buffer_limit_bytes": config.traffic.max_request_body_bytes},
                    },
                },
                {
                    "applyTo": "NETWORK_FILTER",
                    "match": {**gateway_listener, "listener": {"filterChain": {"filter": {"name": HCM}}}},
                    "patch": {
                        "operation": "MERGE",
                        "value": {
                            "typed_config": {"@type": HCM_TYPE, "stream_idle_timeout": f"{stream_idle_timeout_seconds(config)}s"}
                        },
                    },
                },
                {
                    "applyTo": "HTTP_FILTER",
                    "match": {
                        "context": "GATEWAY",
                        "listener": {
                            "filterChain": {
                                "filter": {
                                    "name": HCM,
                                    "subFilter": {"name": "envoy.filters.http.router"},
                                }
                            }
                        },
                    },
                    "patch": {
                        "operation": "INSERT_BEFORE",
                        "value": {
                            "name": "envoy.filters.http.lua",
                            "typed_config": {
                                "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
                                "default_source_code": {"inline_string": lua_code(config)},
                            },
                        },
                    },
                },
            ],
        },
    }
