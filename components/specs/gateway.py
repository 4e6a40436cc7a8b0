# Long module: the one ingress (its Gateway, who may call it, the filter it runs), which components and tests read as one.
"""The platform's one ingress (pure functions): the Istio Gateway on the configured hosts, who
may call it (a RequestAuthentication for the configured JWT issuer and AuthorizationPolicies
requiring a token and keeping the version override to named principals), the gateway's
resource bounds, and the gateway filter (components/lua/gateway_filter.lua, run by Envoy's Lua
filter) with its generated config: the tier and user from the verified token, the model header
from the body, sticky buckets, body limits, and the tier's vLLM priority for servers that
schedule by priority.

Why the filter reads claims from the JWT filter's dynamic metadata and not from headers that
RequestAuthentication's `outputClaimToHeaders` writes: Envoy's jwt_authn filter *adds* a claim's
header (`headers_->addCopy`) and removes nothing, and adds nothing when the claim is missing
(envoyproxy/envoy source/extensions/filters/http/jwt_authn/authenticator.cc,
`addJWTClaimToHeader`), so a client-sent `x-tier: premium` would survive next to, or instead of,
the claim. The verified payload is what Istio stores as dynamic metadata
(`payload_in_metadata: "payload"`, istio/istio 1.30.3 pilot/pkg/security/authn/policy_applier.go
and pilot/pkg/xds/filters/filters.go `EnvoyJwtFilterPayload`) under the filter's name
(`envoy.filters.http.jwt_authn`, jwt_authn filter.cc `setExtractedData`); a client cannot write
it. The filter removes every client value of the headers it owns and sets them from the payload.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from platform_config.adapters import adapter_revisions, module_name
from platform_config.models import GatewayAuthentication, TrafficConfig
from platform_config.profiles import TierName
from platform_config.serving import (
    CONTROL_HEADER_PREFIXES,
    VLLM_PRIORITY_HEADER,
    queue_seconds,
    route_timeout_seconds,
    user_key_headers,
)

from ..constants import (
    GATEWAY_LISTENER_PORTS,
    GATEWAY_SELECTOR,
    ISTIO_INGRESS_NAMESPACE,
    KNATIVE_LOCAL_GATEWAY_LISTENER_PORT,
    gateway_principal,
    standard_labels,
)
from ..shapes import TIER_ORDER, RoutePlan
from .endpoint_picker.headers import DROPPED_REASON_HEADER, FAIRNESS_HEADER

GATEWAY_NAME = "inference-gateway"
LUA_SOURCE = Path(__file__).resolve().parent.parent / "lua" / "gateway_filter.lua"
HCM = "envoy.filters.network.http_connection_manager"
HCM_TYPE = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"

# The only place a token is read from: `Authorization: Bearer`. Istio's default would also take
# an `access_token` query parameter (istio/api v1.30.3 security/v1beta1/request_authentication.proto,
# JWTRule "default locations"), which ends up in access logs.
TOKEN_HEADER = {"name": "authorization", "prefix": "Bearer "}

# Bounds on what one client may hold at the gateway; every field checked against the Envoy API
# Istio 1.30.3 builds with (envoyproxy/go-control-plane envoy module at the pseudo-version in
# istio/istio 1.30.3 go.mod, 98966259b99a: http_connection_manager/v3 HttpConnectionManager
# max_request_headers_kb (at most 8192), request_headers_timeout, request_timeout,
# stream_idle_timeout, common_http_protocol_options; config/core/v3 HttpProtocolOptions
# idle_timeout, max_headers_count; Http2ProtocolOptions max_concurrent_streams).
MAX_REQUEST_HEADERS_KIB = 32  # Envoy's default is 60; a JWT plus the OpenAI headers fit in a few KiB
MAX_HEADERS_COUNT = 64  # Envoy's default is 100
MAX_CONCURRENT_STREAMS = 64  # per HTTP/2 connection; Envoy's default is 2^31 - 1
# The request phase: headers within 10 s, the whole body within 60 s (the timer stops once the
# request is sent upstream, so a long answer is not cut by it). A slow sender cannot hold a
# stream for the response's long idle allowance.
REQUEST_HEADERS_TIMEOUT_SECONDS = 10
REQUEST_TIMEOUT_SECONDS = 60
# A connection with no stream open is closed after this (Envoy's default is one hour).
CONNECTION_IDLE_TIMEOUT_SECONDS = 300

# The filter's caps on what it reads from a body. The model name and the user id become header
# values: a longer model name is refused with 400, a longer user id is not used (from the body)
# or refused with 403 (from the token).
MAX_MODEL_NAME_BYTES = 256
MAX_USER_BYTES = 256
# Caps of the exact scan of the top-level members (the filter's slow path, for a body naming
# "model" or "user" more than once): an inference request has a few dozen top-level members with
# short names; more (or a longer name) is refused with 400 before any per-member work beyond the
# cap. The fast path reads no members one by one and needs no cap beyond the tier's body limit.
MAX_BODY_MEMBERS = 128
MAX_MEMBER_NAME_BYTES = 256
# Nesting of brackets inside a member's value (OpenAI messages with tool calls nest a handful).
MAX_BODY_DEPTH = 64


# --- the Gateway and who may call it --------------------------------------------------------


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


def _gateway_metadata(name: str) -> dict[str, Any]:
    return {"name": name, "namespace": ISTIO_INGRESS_NAMESPACE, "labels": standard_labels(name, "gateway")}


def request_authentication(auth: GatewayAuthentication) -> dict[str, Any]:
    """Tokens of the configured issuer are verified at the gateway: an invalid, expired or
    wrong-audience token gets 401 (403 for the audience) from Envoy's jwt_authn filter. A
    request without a token passes this object; `require_token` refuses it."""
    rule: dict[str, Any] = {"issuer": auth.issuer, "audiences": list(auth.audiences), "fromHeaders": [TOKEN_HEADER]}
    if auth.jwks_uri is not None:
        rule["jwksUri"] = auth.jwks_uri
    else:
        rule["jwks"] = auth.jwks
    return {
        "apiVersion": "security.istio.io/v1",
        "kind": "RequestAuthentication",
        "metadata": _gateway_metadata("inference-gateway-jwt"),
        # forwardOriginalToken stays false: Envoy strips the token, model servers never see it.
        "spec": {"selector": {"matchLabels": GATEWAY_SELECTOR}, "jwtRules": [rule]},
    }


def public_listener_ports(traffic: TrafficConfig, *, redirects: bool = False) -> list[int]:
    """The gateway pods' listener ports (GATEWAY_LISTENER_PORTS) of the platform's Gateway servers
    that serve requests, or (`redirects`) of those that only redirect to HTTPS: where clients'
    requests arrive, as opposed to Knative's local gateway on the same pods."""
    return sorted(
        {
            GATEWAY_LISTENER_PORTS[server["port"]["number"]]
            for server in gateway(traffic)["spec"]["servers"]
            if bool(server.get("tls", {}).get("httpsRedirect")) == redirects
        }
    )


def _to_ports(ports: list[int], hosts: list[str] | None = None) -> list[dict[str, Any]]:
    """An authorization rule's `to`: these listener ports (and, if given, these hosts only)."""
    return [{"operation": {"ports": [str(port) for port in ports], **({"hosts": hosts} if hosts is not None else {})}}]


def redirect_rules(traffic: TrafficConfig) -> list[dict[str, Any]]:
    """Any caller on a listener that only redirects to HTTPS, for the Gateway's own hosts: their
    one route there is the redirect. Another host on that port (Knative's knative-ingress-gateway
    also serves port 80, `*`, on these pods; a public Knative Service would be routed there) still
    needs a token. `hosts` match the request's :authority, case-insensitively, `host:*` with any
    port (istio 1.30.3 pilot/pkg/security/authz/model/generator.go hostGenerator, matcher/header.go
    HostMatcher)."""
    ports = public_listener_ports(traffic, redirects=True)
    if not ports:
        return []
    hosts = [name for host in traffic.hosts for name in ((host,) if host == "*" else (host, f"{host}:*"))]
    return [{"to": _to_ports(ports, hosts)}]


def require_token(traffic: TrafficConfig) -> dict[str, Any]:
    """On the public listeners that serve, only requests with a verified token's principal reach a
    route (a request without one gets 403 from Istio's RBAC filter); one that only redirects to
    HTTPS takes every request for the Gateway's hosts (redirect_rules). On Knative's local gateway
    listener, where the gateway sends the requests of Knative-served versions back into its own
    pods (the token already checked and stripped), only the gateway's own mesh identity: that
    server terminates ISTIO_MUTUAL (specs/knative.py), so no other workload can send requests
    through it in the gateway's name. Istio ANDs a rule's `from` and `to` and ORs its rules; a
    request on any other listener matches no rule and is refused (istio/istio 1.30.3
    pilot/pkg/security/authz/model/model.go New; `ports` is the listener's port,
    generator.go destPortGenerator)."""
    return {
        "apiVersion": "security.istio.io/v1",
        "kind": "AuthorizationPolicy",
        "metadata": _gateway_metadata("inference-gateway-require-token"),
        "spec": {
            "selector": {"matchLabels": GATEWAY_SELECTOR},
            "action": "ALLOW",
            "rules": [
                {"from": [{"source": {"requestPrincipals": ["*"]}}], "to": _to_ports(public_listener_ports(traffic))},
                {
                    "from": [{"source": {"principals": [gateway_principal()]}}],
                    "to": _to_ports([KNATIVE_LOCAL_GATEWAY_LISTENER_PORT]),
                },
                *redirect_rules(traffic),
            ],
        },
    }


def deny_version_override(traffic: TrafficConfig, headers: list[str]) -> dict[str, Any]:
    """A request carrying a release's override header is refused (403) on the public listeners
    unless its principal is one the config names. Istio turns a `request.headers` value of `*`
    into a presence match (istio/istio 1.30.3 pilot/pkg/security/authz/matcher/header.go,
    HeaderMatcher), and a DENY policy is evaluated before any ALLOW one. With no principals
    named, the rule has no `from`: it refuses everyone. Knative's local gateway listener is left
    out: a request the public listener let through still carries the header there, with no token."""
    principals = list(traffic.authentication.version_override_principals)
    rules = []
    for header in headers:
        rule: dict[str, Any] = {
            "to": _to_ports(public_listener_ports(traffic)),
            "when": [{"key": f"request.headers[{header}]", "values": ["*"]}],
        }
        if principals:
            rule["from"] = [{"source": {"notRequestPrincipals": principals}}]
        rules.append(rule)
    return {
        "apiVersion": "security.istio.io/v1",
        "kind": "AuthorizationPolicy",
        "metadata": _gateway_metadata("inference-gateway-version-override"),
        "spec": {"selector": {"matchLabels": GATEWAY_SELECTOR}, "action": "DENY", "rules": rules},
    }


def override_headers(routes: tuple[RoutePlan, ...]) -> list[str]:
    """Every header a release reads as its version override, once each."""
    return sorted({route.model.release.override_header for route in routes})


def access_policies(traffic: TrafficConfig, routes: tuple[RoutePlan, ...]) -> list[dict[str, Any]]:
    """The RequestAuthentication and the AuthorizationPolicies of the gateway."""
    auth = traffic.authentication
    policies = [request_authentication(auth), require_token(traffic)]
    headers = override_headers(routes)
    if headers:
        policies.append(deny_version_override(traffic, headers))
    return policies


# --- the gateway filter ----------------------------------------------------------------------


def owned_headers(traffic: TrafficConfig, routes: tuple[RoutePlan, ...]) -> list[str]:
    """The headers the filter sets (tier, bucket, model, every user key): it removes every client
    value of them first."""
    return sorted(
        {traffic.tier_header, traffic.bucket_header, traffic.model_header, *user_key_headers(route.model for route in routes)}
    )


def max_request_body_bytes(traffic: TrafficConfig) -> int:
    """The largest tier's body limit: what the gateway buffers per connection."""
    return max(policy.max_request_body_bytes for policy in traffic.tiers.values())


def unclaimed_tier(traffic: TrafficConfig, route: RoutePlan) -> TierName:
    """The tier of a request for the route's model whose token claims none: batch for a model that
    serves only the batch tier (a batch client works unchanged), else the default tier. Never a
    class above the default: a token without a claim calling a model that serves only premium
    still gets the routes' 403."""
    return "batch" if {t.tier for t in route.tiers} == {"batch"} else traffic.default_tier


def max_unclaimed_body_bytes(traffic: TrafficConfig, routes: tuple[RoutePlan, ...]) -> int:
    """The largest body a token without a tier claim may send before the filter knows its model:
    the limit of any tier such a request may end up in (checked again once the tier is known)."""
    tiers = {traffic.default_tier, *(unclaimed_tier(traffic, route) for route in routes)}
    return max(traffic.tiers[tier].max_request_body_bytes for tier in tiers)


def filter_config(traffic: TrafficConfig, routes: tuple[RoutePlan, ...]) -> dict[str, Any]:
    auth = traffic.authentication
    return {
        "tier_header": traffic.tier_header,
        "default_tier": traffic.default_tier,
        "bucket_header": traffic.bucket_header,
        "model_header": traffic.model_header,
        "tier_claim": auth.tier_claim,
        "user_claim": auth.user_claim,
        # Absent (nil in Lua) when tenant scoping is off.
        **({"tenant_claim": auth.tenant_claim} if auth.tenant_claim is not None else {}),
        "owned_headers": {header: True for header in owned_headers(traffic, routes)},
        "priorities": {tier: traffic.tiers[tier].vllm_priority for tier in TIER_ORDER},
        "priority_header": VLLM_PRIORITY_HEADER,
        "max_body_bytes": {tier: traffic.tiers[tier].max_request_body_bytes for tier in TIER_ORDER},
        "max_unclaimed_body_bytes": max_unclaimed_body_bytes(traffic, routes),
        "max_user_bytes": MAX_USER_BYTES,
        "max_model_name_bytes": MAX_MODEL_NAME_BYTES,
        "max_members": MAX_BODY_MEMBERS,
        "max_member_name_bytes": MAX_MEMBER_NAME_BYTES,
        "max_depth": MAX_BODY_DEPTH,
        # Every request header under these is another component's control (the endpoint pickers' and
        # their proxies', vLLM's): the filter removes every client value of them, so a header a newer
        # release adds (the picker's `x-llm-d-inference-ttl`) is covered before it is used.
        "control_header_prefixes": list(CONTROL_HEADER_PREFIXES),
        "shed_status_header": DROPPED_REASON_HEADER,
        "fairness_header": FAIRNESS_HEADER,
        "retry_after": {tier: queue_seconds(traffic.tiers[tier]) for tier in TIER_ORDER},
        "models": {
            **{
                route.model.openai_name: {
                    # The name as a JSON string: the filter appends it to the body as its last "model".
                    "name_json": json.dumps(route.model.openai_name),
                    "user_key_header": route.model.release.user_key_header,
                    "priority_tiers": {t.tier: True for t in route.tiers if t.by_priority},
                    "unclaimed_tier": unclaimed_tier(traffic, route),
                    "tenants": {tenant: True for tenant in (route.model.tenant, *route.model.callers)},
                }
                for route in routes
            },
            **{name: entry for route in routes for name, entry in adapter_filter_entries(traffic, route).items()},
        },
    }


def adapter_filter_entries(traffic: TrafficConfig, route: RoutePlan) -> dict[str, dict[str, Any]]:
    """The filter's settings for each adapter of the route's model, by its OpenAI name: the base
    model's user key, priorities, tenants and callers, for every tier its route takes (a batch
    model's servers that take the batch tier load its adapters too, under the same module names,
    with that tier's priority where they schedule by it); the LoRA module the request's `model` is
    rewritten to and, for an adapter with a canary, how the filter picks the revision (README,
    LoRA adapters)."""
    model = route.model
    entries: dict[str, dict[str, Any]] = {}
    for adapter in model.adapters:
        modules = {revision: module_name(adapter.name, revision) for revision, _ in adapter_revisions(adapter)}
        entry: dict[str, Any] = {
            "name_json": json.dumps(next(iter(modules.values()))),
            "user_key_header": model.release.user_key_header,
            "priority_tiers": {t.tier: True for t in route.tiers if t.by_priority},
            "unclaimed_tier": unclaimed_tier(traffic, route),
            "tenants": {tenant: True for tenant in (model.tenant, *model.callers)},
        }
        release = adapter.release
        if release is not None and release.canary is not None:
            entry["adapter_canary"] = {
                "override_header": model.release.override_header,
                "modules": {revision: json.dumps(name) for revision, name in modules.items() if revision is not None},
                "stable_json": json.dumps(modules[release.stable]),
                "canary_json": json.dumps(modules[release.canary]),
                "canary_weight": release.canary_weight,
            }
        entries[adapter.name] = entry
    return entries


def _lua_string(value: str) -> str:
    """A Lua string literal: JSON's quoting, which for printable ASCII uses only the escapes `\\"` and `\\\\` that Lua
    reads alike; anything else (a `\\u` escape Lua 5.1 does not read, a control character) is refused, whatever the
    config's patterns already allow."""
    if not (value.isascii() and value.isprintable()):
        raise ValueError(f"{value!r} is not printable ASCII: the gateway filter's Lua holds no other string")
    return json.dumps(value)


def _lua_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, str):
        return _lua_string(value)
    if isinstance(value, (list, tuple)):
        return "{" + ", ".join(_lua_literal(item) for item in value) + "}"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{" + ", ".join(f"[{_lua_string(str(k))}] = {_lua_literal(v)}" for k, v in sorted(value.items())) + "}"
    raise TypeError(f"no Lua literal for {value!r}")


def lua_code(traffic: TrafficConfig, routes: tuple[RoutePlan, ...]) -> str:
    """The filter's inline code: the generated CONFIG, then the filter source unchanged."""
    return f"local CONFIG = {_lua_literal(filter_config(traffic, routes))}\n\n{LUA_SOURCE.read_text()}"


def stream_idle_timeout_seconds(traffic: TrafficConfig) -> int:
    """A response may be silent (not streamed) for up to the longest tier timeout; Envoy's
    default stream idle timeout (300 s) would cut it earlier."""
    return max(route_timeout_seconds(t) for t in traffic.tiers.values()) + 30


def connection_bounds(traffic: TrafficConfig) -> dict[str, Any]:
    """The HTTP connection manager's bounds per connection and stream (see the constants)."""
    return {
        "@type": HCM_TYPE,
        "max_request_headers_kb": MAX_REQUEST_HEADERS_KIB,
        "request_headers_timeout": f"{REQUEST_HEADERS_TIMEOUT_SECONDS}s",
        "request_timeout": f"{REQUEST_TIMEOUT_SECONDS}s",
        "stream_idle_timeout": f"{stream_idle_timeout_seconds(traffic)}s",
        "common_http_protocol_options": {
            "idle_timeout": f"{CONNECTION_IDLE_TIMEOUT_SECONDS}s",
            "max_headers_count": MAX_HEADERS_COUNT,
        },
        "http2_protocol_options": {"max_concurrent_streams": MAX_CONCURRENT_STREAMS},
    }


def lua_filter_patch(code: str, port: int) -> dict[str, Any]:
    """The gateway filter just before the router on one public listener that serves (a listener
    that only redirects to HTTPS needs none). Not on Knative's local gateway listener: there the
    request is the gateway's own second pass, already filtered (run again, it would take the
    default tier and no tenant from the stripped token). istiod matches `portNumber` against the
    listener's port (pilot/pkg/networking/core/envoyfilter/listener_patch.go listenerMatch)."""
    return {
        "applyTo": "HTTP_FILTER",
        "match": {
            "context": "GATEWAY",
            "listener": {
                "portNumber": port,
                "filterChain": {"filter": {"name": HCM, "subFilter": {"name": "envoy.filters.http.router"}}},
            },
        },
        "patch": {
            "operation": "INSERT_BEFORE",
            "value": {
                "name": "envoy.filters.http.lua",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
                    "default_source_code": {"inline_string": code},
                },
            },
        },
    }


def envoy_filter(traffic: TrafficConfig, routes: tuple[RoutePlan, ...]) -> dict[str, Any]:
    gateway_listener = {"context": "GATEWAY"}
    # Built once: every serving listener's patch carries the same filter.
    code = lua_code(traffic, routes)
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
                    # The filter buffers request bodies to read them: allow the largest tier's
                    # (beyond it Envoy answers 413 itself; the filter holds each tier to its own).
                    "applyTo": "LISTENER",
                    "match": gateway_listener,
                    "patch": {
                        "operation": "MERGE",
                        "value": {"per_connection_buffer_limit_bytes": max_request_body_bytes(traffic)},
                    },
                },
                {
                    "applyTo": "NETWORK_FILTER",
                    "match": {**gateway_listener, "listener": {"filterChain": {"filter": {"name": HCM}}}},
                    "patch": {"operation": "MERGE", "value": {"typed_config": connection_bounds(traffic)}},
                },
                *(lua_filter_patch(code, port) for port in public_listener_ports(traffic)),
            ],
        },
    }
