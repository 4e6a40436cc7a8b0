"""The gateway's routes as istiod 1.30.3 builds them from the rendered Gateway and VirtualServices, for
tests/istio_gateway.py: one route configuration per Gateway server, and Knative's local gateway's
(net-istio's KIngress VirtualService). Each translation names the istiod source it follows (istio/istio at
tag 1.30.3)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .istio_gateway_filters import typed

if TYPE_CHECKING:
    from .istio_gateway import GatewayObjects

# Knative's local gateway as net-istio ships it (knative/operator knative-v1.23.0
# cmd/operator/kodata/ingress/1.23/istio/net-istio.yaml): the Service the gateway's routes name, whose
# port is named http2 (h2c, or h2 inside ISTIO_MUTUAL: pilot/pkg/networking/core/cluster_builder.go
# setUpstreamProtocol) and carries disable-gateway-port-translation, and its Gateway's server, port
# 8081 HTTP, which the KnativeServing may override. Read here from net-istio, not from the platform.
NET_ISTIO_LOCAL_GATEWAY_HOST = "knative-local-gateway.istio-system.svc.cluster.local"
NET_ISTIO_LOCAL_GATEWAY_SERVER: dict[str, Any] = {"port": {"number": 8081, "name": "http", "protocol": "HTTP"}, "hosts": ["*"]}


# --- routes -----------------------------------------------------------------------------------


def cluster_name(destination: Mapping[str, Any]) -> str:
    """pilot/pkg/model/service.go BuildSubsetKey: `outbound|<port>|<subset>|<host>`."""
    return f"outbound|{destination['port']['number']}|{destination.get('subset', '')}|{destination['host']}"


def _header_matcher(name: str, match: Mapping[str, Any]) -> dict[str, Any]:
    """pilot/pkg/networking/core/route/route.go translateHeaderMatch (util.ConvertToEnvoyMatch):
    exact, prefix, or a RE2 regex, which Envoy matches against the whole value."""
    if "exact" in match:
        return {"name": name, "string_match": {"exact": match["exact"]}}
    if "prefix" in match:
        return {"name": name, "string_match": {"prefix": match["prefix"]}}
    if "regex" in match:
        return {"name": name, "string_match": {"safe_regex": {"regex": match["regex"]}}}
    raise ValueError(f"header match the test tier does not translate: {dict(match)}")


def _route_match(match: Mapping[str, Any] | None) -> dict[str, Any]:
    """route.go TranslateRouteMatch: prefix "/" without a uri match, header matchers sorted by name."""
    out: dict[str, Any] = {"prefix": "/", "case_sensitive": True}
    if match and match.get("headers"):
        out["headers"] = [_header_matcher(name, m) for name, m in sorted(match["headers"].items())]
    if match and set(match) - {"headers"}:
        raise ValueError(f"match fields the test tier does not translate: {sorted(set(match) - {'headers'})}")
    return out


def _header_operations(operations: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """route.go TranslateHeadersOperations, translateAppendHeaders: `set` overwrites
    (OVERWRITE_IF_EXISTS_OR_ADD), sorted by name, except that a set Host (or :authority) is the
    route's authority rewrite."""
    add: list[dict[str, Any]] = []
    authority = None
    for name, value in sorted(operations.get("set", {}).items()):
        if name.lower() in ("host", ":authority"):
            authority = value
            continue
        add.append({"header": {"key": name, "value": value}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"})
    if set(operations) - {"set"}:
        raise ValueError(f"header operations the test tier does not translate: {sorted(set(operations) - {'set'})}")
    return add, authority


DEFAULT_RETRY_ON = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"


def _retry_policy(retries: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """pilot/pkg/networking/core/route/retry/retry.go ConvertPolicy: attempts 0 is no retry; else
    the attempts, per-try timeout and retry_on (numeric codes moved to retriable_status_codes),
    with the previous-hosts predicate and 5 host selection attempts istiod always adds. Without
    `retries`, istiod's default: 2 attempts on DEFAULT_RETRY_ON with 503 retriable."""
    base: dict[str, Any] = {
        "retry_host_predicate": [
            {
                "name": "envoy.retry_host_predicates.previous_hosts",
                "typed_config": typed("envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"),
            }
        ],
        "host_selection_retry_max_attempts": "5",
    }
    if retries is None:
        return {**base, "retry_on": DEFAULT_RETRY_ON, "num_retries": 2, "retriable_status_codes": [503]}
    if retries.get("attempts", 0) <= 0:
        return None
    conditions = [c.strip() for c in retries.get("retryOn", DEFAULT_RETRY_ON).split(",") if c.strip()]
    codes = [int(c) for c in conditions if c.isdigit()]
    named = [c for c in conditions if not c.isdigit()]
    policy: dict[str, Any] = {**base, "num_retries": retries["attempts"], "retry_on": ",".join(named)}
    if codes:
        policy["retriable_status_codes"] = codes
        policy["retry_on"] += ",retriable-status-codes"
    if "perTryTimeout" in retries:
        policy["per_try_timeout"] = retries["perTryTimeout"]
    return policy


def envoy_route(http: Mapping[str, Any], match: Mapping[str, Any] | None) -> dict[str, Any]:
    """One VirtualService HTTP route and one of its matches → one Envoy route (route.go
    BuildHTTPRoutesForVirtualService, TranslateRoute, applyHTTPRouteDestination: one Envoy route
    per match, in order; one destination is a plain cluster even at weight 100, several are
    weighted clusters without the weight-0 ones, each with its own header operations; the
    timeout is the route's or 0s, never Envoy's 15 s)."""
    out: dict[str, Any] = {"name": http.get("name", ""), "match": _route_match(match)}
    if "directResponse" in http:
        response = http["directResponse"]
        out["direct_response"] = {"status": response["status"]}
        if "body" in response:
            out["direct_response"]["body"] = {"inline_string": response["body"]["string"]}
        return out
    timeout = http.get("timeout", "0s")
    action: dict[str, Any] = {"timeout": timeout, "max_grpc_timeout": timeout}
    destinations = http["route"]
    if len(destinations) == 1:
        (only,) = destinations
        action["cluster"] = cluster_name(only["destination"])
        add, authority = _header_operations(only.get("headers", {}).get("request", {}))
        if authority is not None:
            action["host_rewrite_literal"] = authority
        if add:
            out["request_headers_to_add"] = add
    else:
        clusters = []
        for destination in destinations:
            if destination.get("weight", 0) <= 0:
                continue
            add, authority = _header_operations(destination.get("headers", {}).get("request", {}))
            weighted: dict[str, Any] = {"name": cluster_name(destination["destination"]), "weight": destination["weight"]}
            if add:
                weighted["request_headers_to_add"] = add
            if authority is not None:
                weighted["host_rewrite_literal"] = authority
            clusters.append(weighted)
        action["weighted_clusters"] = {"clusters": clusters}
    retry = _retry_policy(http.get("retries"))
    if retry is not None:
        action["retry_policy"] = retry
    out["route"] = action
    return out


def bound_virtual_services(objects: GatewayObjects, gateway: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The VirtualServices naming the Gateway as `<namespace>/<name>` (or by name alone from its
    own namespace)."""
    short, namespace = gateway["metadata"]["name"], gateway["metadata"]["namespace"]
    return [
        vs
        for vs in objects.virtual_services
        if any(
            g == f"{namespace}/{short}" or (g == short and vs["metadata"]["namespace"] == namespace)
            for g in vs["spec"].get("gateways", [])
        )
    ]


def server_routes(objects: GatewayObjects, gateway: Mapping[str, Any], server: Mapping[str, Any]) -> dict[str, Any]:
    """The route configuration of one Gateway server (pilot/pkg/networking/core/gateway.go
    buildGatewayHTTPRouteConfig): a virtual host per host, named `<host>:<server port>`, its
    domain the host alone (port ignored in host matching), the bound VirtualServices' routes in
    order; an httpsRedirect server's virtual host requires TLS (every plaintext request is
    redirected); a request no host matches gets the blackhole host's 404."""
    port = server["port"]["number"]
    hosts = [h.lower() for h in server.get("hosts", ["*"])]
    routes = [
        envoy_route(http, match)
        for service in bound_virtual_services(objects, gateway)
        for http in service["spec"].get("http", [])
        for match in (http.get("match") or [None])
    ]
    vhosts = [
        {"name": f"{host}:{port}", "domains": [host], "routes": routes, "include_request_attempt_count": True} for host in hosts
    ]
    if server.get("tls", {}).get("httpsRedirect"):
        for vhost in vhosts:
            vhost["require_tls"] = "ALL"
    if "*" not in hosts:
        vhosts.append(_blackhole(port))
    return _route_configuration(f"{server['port']['protocol'].lower()}.{port}", vhosts)


def _blackhole(port: int) -> dict[str, Any]:
    """A virtual host of every other host, with no routes: 404. (istiod adds `blackhole:<port>` only
    when a server has no virtual host at all, gateway.go buildGatewayHTTPRouteConfig, and otherwise
    answers an unknown host with no virtual host matched: the same 404.)"""
    return {"name": f"blackhole:{port}", "domains": ["*"], "routes": []}


def _route_configuration(name: str, vhosts: list[dict[str, Any]]) -> dict[str, Any]:
    """A gateway RouteConfiguration as istiod writes it (gateway.go buildGatewayHTTPRouteConfig)."""
    return {
        "name": name,
        "virtual_hosts": vhosts,
        "validate_clusters": False,
        "ignore_port_in_host_matching": True,
        "max_direct_response_body_size_bytes": 1048576,
    }


def knative_local_routes(knative_hosts: Mapping[str, str], port: int) -> dict[str, Any]:
    """net-istio's KIngress VirtualService on the local gateway (pkg/reconciler/ingress/resources/
    virtual_service.go): each cluster-local host routed to its revision, without retries (it sets
    `Retries: &HTTPRetry{}`, "Override default istio behaviour of retrying twice")."""
    vhosts = [
        {
            "name": f"{host}:{port}",
            "domains": [host],
            "routes": [{"match": {"prefix": "/"}, "route": {"cluster": cluster, "timeout": "0s"}}],
        }
        for host, cluster in sorted(knative_hosts.items())
    ]
    vhosts.append(_blackhole(port))
    return _route_configuration(f"http.{port}", vhosts)


def knative_local_server(objects: GatewayObjects) -> Mapping[str, Any]:
    """The local gateway's server: the KnativeServing's override of it (knative/operator
    knative-v1.23.0 ingress/istio.go updateIstioGateway), else net-istio's own (8081, HTTP)."""
    for serving in objects.knative_servings:
        override = serving["spec"].get("ingress", {}).get("istio", {}).get("knative-local-gateway", {})
        if override.get("servers"):
            (server,) = override["servers"]
            return server
    return NET_ISTIO_LOCAL_GATEWAY_SERVER
