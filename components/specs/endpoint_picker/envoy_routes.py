"""How the endpoint picker's Envoy routes a request (to its tier's wait for the EPP, then to the pod
the EPP picked) and how it answers the requests the picker path refuses. LR, SA and IS name the
upstream sources the package's docstring cites."""

from __future__ import annotations

from typing import Any

from ...picker_plan import EndpointPickerPlan, PickerBand
from .headers import DESTINATION_HEADER, DROPPED_REASON_HEADER, OBJECTIVE_HEADER
from .names import objective_of
from .plan_rules import queue_ttl_seconds, route_timeout_seconds, sorted_bands

# The dropped reasons of the proxy's own refusals (the EPP's are in pkg/common/error/error.go): a
# request whose picker could not be asked, and one that waited its tier's whole bound.
PICKER_UNAVAILABLE = "picker-unavailable"
QUEUE_BOUND_EXCEEDED = "queue-bound-exceeded"


def queued_idle_timeout(band: PickerBand) -> str:
    """The idle timeout of a tier's `queued` route: half the tier's bound. While the EPP holds a
    request nothing moves on its stream. When the idle timer fires, Envoy's 408 goes first through
    ext_proc (FULL_DUPLEX_STREAMED, so no message timer) to the EPP, which does not read its stream
    while it holds the request (LR pkg/epp/handlers/server.go handles one message at a time, and
    HandleRequest blocks in flow control); the timer runs once more and the reply then goes to the
    client directly. So a request still unpicked at half its bound is refused (a later pick gets
    the refusal at once, no server sees it), and the client has it by the whole bound, as the
    real-Envoy tests measure with a stand-in that, like the EPP, holds its stream (tests/
    test_picker_proxy_in_envoy.py). An EPP that did read it would only refuse sooner."""
    return f"{band.queue_seconds / 2:g}s"


def picker_routes(plan: EndpointPickerPlan) -> list[dict[str, Any]]:
    """The proxy's routes, first match wins. A request is routed on arrival, by the objective
    header the gateway's route set, to its tier's `queued` route: that route only times the wait
    for the EPP (its idle timeout, `queued_idle_timeout`), so a request held longer than its tier
    allows is refused with the tier's Retry-After (`proxy_replies`), each tier after its own bound
    though the EPP has one TTL. The EPP names the pod in DESTINATION_HEADER and has the route
    chosen again (LR pkg/epp/handlers/request.go, ClearRouteCache), so a picked request takes
    `picked`, with the full route timeout. A request the EPP refuses or cannot take never reaches
    the router: the EPP answers it itself, and a failed EPP is answered by the proxy. No client
    header selects a route: the gateway strips the EPP's headers and the proxy's first filter
    DESTINATION_HEADER, before the route is chosen, and the gateway sets the objective header per
    tier (a request with an objective no tier of this version has, which the gateway never sends,
    would wait in the EPP's default band, bounded by its TTL alone)."""
    route_timeout = f"{route_timeout_seconds(plan)}s"

    def forward(idle_timeout: str) -> dict[str, Any]:
        return {
            "cluster": "original_destination_cluster",
            "host_rewrite_literal": plan.server_host,
            "timeout": route_timeout,
            "idle_timeout": idle_timeout,
        }

    picked = {"prefix": "/", "headers": [{"name": DESTINATION_HEADER, "present_match": True}]}
    routes: list[dict[str, Any]] = [{"name": "picked", "match": picked, "route": forward(route_timeout)}]
    for band in sorted_bands(plan):
        # A route action for its idle timeout. Were the EPP to let a request on without naming a
        # pod (v0.10.0 does not), the ORIGINAL_DST cluster would have no host for it (Envoy
        # original_dst_cluster.cc falls back only to a restored local address, which this
        # listener never has): 503 no healthy upstream, never an unpicked forward.
        objective = {"name": OBJECTIVE_HEADER, "string_match": {"exact": objective_of(plan.name, band.tier)}}
        routes.append(
            {
                "name": f"{band.tier}-queued",
                "match": {"prefix": "/", "headers": [objective]},
                "route": forward(queued_idle_timeout(band)),
            }
        )
    longest = queue_ttl_seconds(plan)
    routes.append(
        {
            "name": "unknown-objective",
            "match": {"prefix": "/"},
            "direct_response": {"status": 503, "body": {"inline_string": "no such tier on this version; retry\n"}},
            "response_headers_to_add": [_header("retry-after", str(longest)), _header(DROPPED_REASON_HEADER, PICKER_UNAVAILABLE)],
        }
    )
    return routes


def _header(key: str, value: str) -> dict[str, Any]:
    return {"header": {"key": key, "value": value}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}


# What the proxy answers for every request the picker path refuses (the EPP's own code for
# backpressure, pkg/common/error/error.go): always with DROPPED_REASON_HEADER, which the gateway
# filter answers as 503 with the tier's Retry-After. The servers never answer 429 (vLLM's
# OpenAI server has no such answer), so the picker pods' sidecar metrics count the picker
# path's refusals apart from the answers of the servers behind it (platform_tools/canary.py).
REFUSED = 429


def proxy_replies(plan: EndpointPickerPlan) -> dict[str, Any]:
    """The proxy's answers to the requests the picker path refuses, each REFUSED with a dropped
    reason, per tier with its Retry-After:
    - a request still unpicked when its `queued` route's idle timer ends it (Envoy's 408, response
      code details `stream_idle_timeout`, no destination yet): QUEUE_BOUND_EXCEEDED. A picked
      request's idle timeout is the route timeout's, and stays a 408.
    - a request whose EPP could not be asked or failed before it named a pod (Envoy's ext_proc
      answers 500, details `ext_proc_error_*`): PICKER_UNAVAILABLE. In FULL_DUPLEX_STREAMED mode
      the body has gone to the EPP, so Envoy 1.38 fails the request whatever failure_mode_allow
      says (measured: tests/test_picker_proxy_in_envoy.py). One the EPP fails after naming its pod
      stays a 500: the server may have taken it, so a retry is not the client's to make.
    - the EPP's own 503 refusals (no endpoints), and the proxy's route for an unknown objective:
      REFUSED too, their reason and Retry-After kept."""

    def refusal(expression: str, headers: list[dict[str, Any]], text: str | None) -> dict[str, Any]:
        mapper: dict[str, Any] = {
            "filter": {
                "extension_filter": {
                    "name": "envoy.access_loggers.extension_filters.cel",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter",
                        "expression": expression,
                    },
                }
            },
            "status_code": REFUSED,
        }
        if headers:
            mapper["headers_to_add"] = headers
        if text is not None:
            mapper["body"] = {"inline_string": f"{text}; retry\n"}
        return mapper

    def of_tier(band: PickerBand, condition: str, reason: str, text: str) -> dict[str, Any]:
        expression = f"{condition} && request.headers['{OBJECTIVE_HEADER}'] == '{objective_of(plan.name, band.tier)}'"
        headers = [_header("retry-after", str(band.queue_seconds)), _header(DROPPED_REASON_HEADER, reason)]
        return refusal(expression, headers, text)

    unpicked = f"!('{DESTINATION_HEADER}' in request.headers)"
    waited = f"response.code_details == 'stream_idle_timeout' && {unpicked}"
    failed = f"response.code_details.startsWith('ext_proc_error') && {unpicked}"
    return {
        "mappers": [
            *(
                of_tier(band, waited, QUEUE_BOUND_EXCEEDED, f"queued longer than the {band.tier} tier's {band.queue_seconds} s")
                for band in sorted_bands(plan)
            ),
            *(of_tier(band, failed, PICKER_UNAVAILABLE, "endpoint picker unavailable") for band in sorted_bands(plan)),
            refusal(f"response.code == 503 && '{DROPPED_REASON_HEADER}' in response.headers", [], None),
        ]
    }
