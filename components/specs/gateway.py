"""The platform's one ingress (pure functions): the Istio Gateway on the configured hosts, and
the gateway filter (components/lua/gateway_filter.lua, run by Envoy's Lua filter) with its
generated config: tier normalisation, the model header from the body, sticky buckets, and the
tier's vLLM priority for servers that schedule by priority."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from platform_config.models import ReleaseConfig, TrafficConfig
from platform_config.serving import route_timeout_seconds

from ..constants import GATEWAY_SELECTOR, ISTIO_INGRESS_NAMESPACE, standard_labels
from ..serving import TIER_ORDER

if TYPE_CHECKING:
    from ..serving import RoutePlan

GATEWAY_NAME = "inference-gateway"
LUA_SOURCE = Path(__file__).resolve().parent.parent / "lua" / "gateway_filter.lua"
HCM = "envoy.filters.network.http_connection_manager"
HCM_TYPE = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"


# --- the Gateway and its filter --------------------------------------------------------------


def gateway(traffic: TrafficConfig) -> dict[str, Any]:
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


def filter_config(traffic: TrafficConfig, routes: tuple[RoutePlan, ...]) -> dict[str, Any]:
    return {
        "tier_header": traffic.tier_header,
        "default_tier": traffic.default_tier,
        "bucket_header": traffic.bucket_header,
        "model_header": traffic.model_header,
        # A request naming no known model is keyed by the release default user header.
        "default_user_header": ReleaseConfig.model_fields["user_key_header"].default,
        "priorities": {tier: traffic.tiers[tier].vllm_priority for tier in TIER_ORDER},
        "models": {
            route.model.openai_name: {
                "user_key_header": route.model.release.user_key_header,
                "priority_tiers": {t.tier: True for t in route.tiers if t.by_priority},
            }
            for route in routes
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


def lua_code(traffic: TrafficConfig, routes: tuple[RoutePlan, ...]) -> str:
    """The filter's inline code: the generated CONFIG, then the filter source unchanged."""
    return f"local CONFIG = {_lua_literal(filter_config(traffic, routes))}\n\n{LUA_SOURCE.read_text()}"


def stream_idle_timeout_seconds(traffic: TrafficConfig) -> int:
    """A response may be silent (not streamed) for up to the longest tier timeout; Envoy's
    default stream idle timeout (300 s) would cut it earlier."""
    return max(route_timeout_seconds(t) for t in traffic.tiers.values()) + 30


def envoy_filter(traffic: TrafficConfig, routes: tuple[RoutePlan, ...]) -> dict[str, Any]:
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
                        "value": {"per_connection_buffer_limit_bytes": traffic.max_request_body_bytes},
                    },
                },
                {
                    "applyTo": "NETWORK_FILTER",
                    "match": {**gateway_listener, "listener": {"filterChain": {"filter": {"name": HCM}}}},
                    "patch": {
                        "operation": "MERGE",
                        "value": {
                            "typed_config": {"@type": HCM_TYPE, "stream_idle_timeout": f"{stream_idle_timeout_seconds(traffic)}s"}
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
                                "default_source_code": {"inline_string": lua_code(traffic, routes)},
                            },
                        },
                    },
                },
            ],
        },
    }
