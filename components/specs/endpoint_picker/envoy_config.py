"""The endpoint picker's Envoy proxy: its bootstrap (the listeners for the model's traffic and for
readiness, and the clusters to the picked pods, to the EPP and to its own stats), around the routes
and refusals of `envoy_routes`. LR, SA and IS name the upstream sources the package's docstring
cites."""

from __future__ import annotations

from typing import Any

from ...picker_plan import EndpointPickerPlan
from .envoy_routes import picker_routes, proxy_replies
from .headers import DESTINATION_HEADER
from .names import EPP_GRPC_PORT, EPP_PROXY_PORT, PROXY_ADMIN_PORT, PROXY_READY_PORT

# Envoy's upstream connections end at the pod's own sidecar, which keeps an idle one open far
# longer (Envoy's default hour: IS pilot/pkg/networking/core/listener_builder.go sets the
# listener's idle timeout only from the proxy's IDLE_TIMEOUT metadata), so no close races a
# reuse; Envoy still drops one idle for 4 s, so a pod that has left the pool holds no
# connections (each picked pod IP is its own ORIGINAL_DST host).
UPSTREAM_IDLE_SECONDS = 4

_HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
_ROUTER: dict[str, Any] = {
    "name": "envoy.filters.http.router",
    "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
}
_HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
_ACCESS_LOG_FORMAT = (
    '{"start_time":"%START_TIME%","method":"%REQ(:METHOD)%","path":"%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%",'
    '"status":"%RESPONSE_CODE%","flags":"%RESPONSE_FLAGS%","details":"%RESPONSE_CODE_DETAILS%",'
    '"upstream":"%UPSTREAM_HOST%","duration_ms":"%DURATION%","request_id":"%REQ(X-REQUEST-ID)%"}\n'
)


def _address(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def _static_cluster(name: str, host: str, port: int) -> dict[str, Any]:
    return {"cluster_name": name, "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _address(host, port)}}]}]}


# The proxy's first filter: a client's DESTINATION_HEADER is removed and the route chosen again
# without it (Envoy chooses a request's route before its filters run: a forged header would
# otherwise have it skip its tier's wait). Headers only, so it holds no body.
_ARRIVAL_FILTER = f"""function envoy_on_request(handle)
  if handle:headers():get("{DESTINATION_HEADER}") ~= nil then
    handle:headers():remove("{DESTINATION_HEADER}")
    handle:clearRouteCache()
  end
end
"""


def proxy_config(plan: EndpointPickerPlan) -> dict[str, Any]:
    """Envoy's bootstrap: the chart's standalone Envoy preset (SA presets.envoy.configMap.data
    envoy.yaml, sidecar mode), with these changes:
    - route timeout = queue TTL + request timeout (chart 86400 s); a stream may be silent that
      long (queued, then prefill), so the route's idle timeout is the same;
    - each tier's wait for the EPP is bounded by its own queueTimeout (`picker_routes`, the
      `queued` routes; `proxy_replies`): refused with the tier's Retry-After;
    - an EPP that cannot be asked fails the request, refused with the tier's Retry-After
      (`proxy_replies`; the chart lets it on with failure_mode_allow, but with the body streamed
      to the EPP Envoy 1.38 fails it all the same, with 500);
    - a client's `x-gateway-destination-endpoint` is removed, and the route chosen again, before
      ext_proc, so only the EPP names the pod Envoy dials (the gateway strips it too);
    - the Host is rewritten to the servers' Service (`server_host`): the pod's sidecar routes
      Envoy's connection to podIP:<port> by Host (IS pilot/pkg/networking/core/httproute.go, the
      0.0.0.0_<port> route's virtual hosts), and any other Host falls to its catch-all
      PassthroughCluster, plaintext, which the servers' STRICT mTLS refuses;
    - connect timeouts of seconds, not the chart's 1000 s and 86400 s; vLLM connections idle out
      before uvicorn's keep-alive closes them; IPv4 only (no `::` listeners: the cluster is
      IPv4, and binding `::` fails where a pod has IPv6 disabled)."""
    return {
        "admin": proxy_admin(),
        "static_resources": {
            "listeners": [ready_listener(), model_listener(plan)],
            "clusters": [stats_cluster(), original_destination_cluster(), ext_proc_cluster()],
        },
    }


def proxy_admin() -> dict[str, Any]:
    """Envoy's admin, on loopback only, its access log discarded."""
    return {
        "address": _address("127.0.0.1", PROXY_ADMIN_PORT),
        "access_log": [
            {
                "name": "envoy.access_loggers.file",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
                    "path": "/dev/null",
                },
            }
        ],
    }


# --- listeners ------------------------------------------------------------------------------


def ready_listener() -> dict[str, Any]:
    """The kubelet's readiness probe (/ready) and the proxy's own stats (/stats/prometheus), as
    the chart's preset has them."""
    return {
        "name": f"envoy-proxy-ready-0.0.0.0-{PROXY_READY_PORT}",
        "address": _address("0.0.0.0", PROXY_READY_PORT),
        "filter_chains": [
            {
                "filters": [
                    {
                        "name": "envoy.filters.network.http_connection_manager",
                        "typed_config": {
                            "@type": _HCM,
                            "stat_prefix": "envoy-ready-http",
                            "route_config": {
                                "name": "local_route",
                                "virtual_hosts": [
                                    {
                                        "name": "prometheus_stats",
                                        "domains": ["*"],
                                        "routes": [
                                            {"match": {"prefix": "/stats/prometheus"}, "route": {"cluster": "prometheus_stats"}}
                                        ],
                                    }
                                ],
                            },
                            "http_filters": [
                                {
                                    "name": "envoy.filters.http.health_check",
                                    "typed_config": {
                                        "@type": "type.googleapis.com/envoy.extensions.filters.http.health_check.v3.HealthCheck",
                                        "pass_through_mode": False,
                                        "headers": [{"name": ":path", "string_match": {"exact": "/ready"}}],
                                    },
                                },
                                _ROUTER,
                            ],
                        },
                    }
                ]
            }
        ],
    }


def model_listener(plan: EndpointPickerPlan) -> dict[str, Any]:
    """The listener the gateway sends the version's requests to (the Service's `http` port)."""
    return {
        "name": "vllm",
        "address": _address("0.0.0.0", EPP_PROXY_PORT),
        "per_connection_buffer_limit_bytes": 32768,
        "filter_chains": [
            {
                "name": "vllm",
                "filters": [
                    {
                        "name": "envoy.filters.network.http_connection_manager",
                        "typed_config": model_connection_manager(plan),
                    }
                ],
            }
        ],
    }


def model_connection_manager(plan: EndpointPickerPlan) -> dict[str, Any]:
    """The model listener's HTTP handling: the picker's routes, its filters, the limits on a
    gateway connection, the refusals' answers and a JSON access log."""
    return {
        "@type": _HCM,
        "stat_prefix": f"http-{EPP_PROXY_PORT}",
        "route_config": {
            "name": "vllm",
            "virtual_hosts": [
                {
                    "name": "vllm-default",
                    "domains": ["*"],
                    "routes": picker_routes(plan),
                }
            ],
        },
        "http_filters": model_filters(),
        "http2_protocol_options": {
            "max_concurrent_streams": 100,
            "initial_stream_window_size": 65536,
            "initial_connection_window_size": 1048576,
        },
        "use_remote_address": True,
        "normalize_path": True,
        "merge_slashes": True,
        "server_header_transformation": "PASS_THROUGH",
        "common_http_protocol_options": {
            "headers_with_underscores_action": "REJECT_REQUEST",
            # A gateway connection with no request on it for 5 minutes is closed.
            "idle_timeout": "300s",
        },
        "request_headers_timeout": "10s",
        "local_reply_config": proxy_replies(plan),
        "path_with_escaped_slashes_action": "UNESCAPE_AND_REDIRECT",
        "access_log": [access_log()],
    }


def access_log() -> dict[str, Any]:
    """Each request on the model listener, one JSON line on stdout (_ACCESS_LOG_FORMAT)."""
    return {
        "name": "envoy.access_loggers.file",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
            "path": "/dev/stdout",
            "log_format": {"text_format_source": {"inline_string": _ACCESS_LOG_FORMAT}},
        },
    }


def model_filters() -> list[dict[str, Any]]:
    """The model listener's filters, in order: the arrival filter (_ARRIVAL_FILTER), ext_proc to
    the EPP, then the router."""
    return [
        {
            "name": "envoy.filters.http.lua",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
                "default_source_code": {"inline_string": _ARRIVAL_FILTER},
            },
        },
        {
            "name": "envoy.filters.http.ext_proc",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
                # An EPP that cannot be asked fails the request (refused by proxy_replies):
                # the streamed body has gone to it, so Envoy 1.38 would fail the request even if
                # allowed to go on.
                "failure_mode_allow": False,
                "grpc_service": {
                    "envoy_grpc": {"cluster_name": "ext_proc", "authority": f"localhost:{EPP_GRPC_PORT}"},
                    "timeout": "10s",
                },
                "processing_mode": {
                    "request_header_mode": "SEND",
                    "response_header_mode": "SEND",
                    "request_body_mode": "FULL_DUPLEX_STREAMED",
                    "response_body_mode": "FULL_DUPLEX_STREAMED",
                    "request_trailer_mode": "SEND",
                    "response_trailer_mode": "SEND",
                },
                # No message_timeout: Envoy runs none for FULL_DUPLEX_STREAMED bodies, and it is
                # capped at 1 h, which a long tier timeout would exceed; each tier's `queued`
                # route, the EPP's queue TTL and the route timeout bound a request.
            },
        },
        {"name": _ROUTER["name"], "typed_config": {**_ROUTER["typed_config"], "suppress_envoy_headers": True}},
    ]


# --- clusters -------------------------------------------------------------------------------


def stats_cluster() -> dict[str, Any]:
    """The ready listener's way to the admin's stats."""
    return {
        "name": "prometheus_stats",
        "type": "STATIC",
        "connect_timeout": "0.250s",
        "load_assignment": _static_cluster("prometheus_stats", "127.0.0.1", PROXY_ADMIN_PORT),
    }


def original_destination_cluster() -> dict[str, Any]:
    """The picked pods: each request goes to the address the EPP names in DESTINATION_HEADER."""
    return {
        "name": "original_destination_cluster",
        "type": "ORIGINAL_DST",
        "connect_timeout": "5s",
        "lb_policy": "CLUSTER_PROVIDED",
        "circuit_breakers": {"thresholds": [{"max_connections": 40000, "max_pending_requests": 40000, "max_requests": 40000}]},
        "original_dst_lb_config": {"use_http_header": True, "http_header_name": DESTINATION_HEADER},
        "typed_extension_protocol_options": {
            _HTTP_OPTIONS: {
                "@type": f"type.googleapis.com/{_HTTP_OPTIONS}",
                "common_http_protocol_options": {"idle_timeout": f"{UPSTREAM_IDLE_SECONDS}s"},
                "explicit_http_config": {"http_protocol_options": {}},
            }
        },
    }


def ext_proc_cluster() -> dict[str, Any]:
    """The EPP's ext_proc server in the same pod, over loopback gRPC, health-checked."""
    return {
        "name": "ext_proc",
        "type": "STATIC",
        "connect_timeout": "5s",
        "lb_policy": "LEAST_REQUEST",
        "circuit_breakers": {
            "thresholds": [{"max_connections": 40000, "max_pending_requests": 40000, "max_requests": 40000, "max_retries": 1024}]
        },
        # The EPP's gRPC health service on 9002 exists only with --health-checking (LR
        # pkg/epp/server/runserver.go), which the EPP container sets.
        "health_checks": [
            {
                "timeout": "2s",
                "interval": "10s",
                "unhealthy_threshold": 3,
                "healthy_threshold": 2,
                "reuse_connection": True,
                "grpc_health_check": {"service_name": "envoy.service.ext_proc.v3.ExternalProcessor"},
                "tls_options": {"alpn_protocols": ["h2"]},
            }
        ],
        # The EPP serves ext_proc over TLS with a self-signed certificate (--secure-serving,
        # default true, options.go); over loopback, unvalidated, as the chart does.
        "transport_socket": {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "common_tls_context": {},
            },
        },
        "typed_extension_protocol_options": {
            _HTTP_OPTIONS: {
                "@type": f"type.googleapis.com/{_HTTP_OPTIONS}",
                "explicit_http_config": {
                    "http2_protocol_options": {"initial_stream_window_size": 65536, "initial_connection_window_size": 1048576}
                },
            }
        },
        "load_assignment": _static_cluster("ext_proc", "127.0.0.1", EPP_GRPC_PORT),
    }
