"""The HTTP header names a setting may give: the platform's own headers, never one that the HTTP standards, the
mesh's proxies or credentials already mean."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

from .base import _full_match

# Header names no setting may name, by why (RFC 9110 and what the gateway's proxies own): the
# platform's headers are set, read or stripped by the gateway filter, so each must be one that
# nothing else on the path means or rewrites.
FORBIDDEN_HEADER_NAMES: dict[str, frozenset[str]] = {
    # Hop-by-hop (RFC 9110 7.6.1, RFC 9112 7.1-7.4): consumed or rewritten by every proxy.
    "a hop-by-hop header": frozenset(
        {"connection", "proxy-connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade"}
    ),
    # The request's representation and framing (RFC 9110 8, 7.2, 10.1.1): rewriting one breaks the body.
    "a representation or framing header": frozenset(
        {
            "content-length",
            "content-type",
            "content-encoding",
            "content-language",
            "content-location",
            "content-range",
            "content-md5",
            "digest",
            "expect",
            "host",
            "range",
        }
    ),  # fmt: skip
    # Credentials: the gateway verifies the token in Authorization, and a credential must never be
    # copied into another header or a metric label.
    "a credential header": frozenset(
        {
            "authorization",
            "proxy-authorization",
            "proxy-authenticate",
            "www-authenticate",
            "cookie",
            "set-cookie",
            "x-api-key",
            "api-key",
            "x-amz-security-token",
        }
    ),  # fmt: skip
    # Set by the mesh's proxies on every request (Envoy's x-forwarded-*, x-request-id, tracing:
    # W3C, B3, Jaeger, AWS X-Ray, Google Cloud, SkyWalking; Envoy's x-client-trace-id).
    "a header the mesh's proxies set": frozenset(
        {
            "forwarded",
            "via",
            "x-request-id",
            "x-real-ip",
            "traceparent",
            "tracestate",
            "b3",
            "uber-trace-id",
            "x-amzn-trace-id",
            "x-cloud-trace-context",
            "grpc-trace-bin",
            "sw8",
            "x-client-trace-id",
        }
    ),  # fmt: skip
    # Rewrites what the request means to a proxy or framework in front of the servers.
    "a method or route override": frozenset({"x-http-method-override", "x-http-method", "x-method-override", "x-original-url"}),
}
# Prefixes of headers Envoy and Istio set or act on (x-envoy-*: Envoy's router and filters;
# x-forwarded-*: the connection manager; x-b3-*: tracing; x-istio-*, x-ot-*).
FORBIDDEN_HEADER_PREFIXES: tuple[str, ...] = ("x-envoy-", "x-forwarded-", "x-b3-", "x-istio-", "x-ot-", "uberctx-", "x-datadog-")
HEADER_NAME_MAX_LENGTH = 64


def _the_platforms_own(value: str) -> str:
    for why, names in FORBIDDEN_HEADER_NAMES.items():
        if value in names:
            raise ValueError(f"{value!r} is {why}: the platform's headers must be its own; use another name")
    if value.startswith(FORBIDDEN_HEADER_PREFIXES):
        raise ValueError(
            f"{value!r} is under a prefix Envoy or Istio set or act on ({', '.join(FORBIDDEN_HEADER_PREFIXES)}); use another name"
        )
    return value


HeaderName = Annotated[
    str,
    _full_match(
        r"[a-z0-9][a-z0-9-]*",
        f"is not an HTTP header name: use lowercase letters, digits and '-', at most {HEADER_NAME_MAX_LENGTH} characters",
        HEADER_NAME_MAX_LENGTH,
    ),
    AfterValidator(_the_platforms_own),
]
