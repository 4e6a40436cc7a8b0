"""A stand-in for the llm-d endpoint picker (EPP) on loopback, speaking Envoy's ext_proc protocol
over gRPC and TLS as the EPP does (llm-d-router v0.10.0 pkg/epp/handlers/server.go): it reads a
request's headers and its whole body (FULL_DUPLEX_STREAMED), then either holds it (a queue that
never dispatches), sheds it with the EPP's own answer (an ImmediateResponse carrying
`x-llm-d-request-dropped-reason`, pkg/common/error/error.go BuildErrResponse), or picks: the
request-headers response names the endpoint in `x-gateway-destination-endpoint` and clears the
route cache, and the body goes back as one streamed chunk (pkg/epp/handlers/request.go). Responses
are passed through unchanged.

The real picker cannot run here (it needs a cluster's InferencePool and pods), so this fake is
only the picker's side of the wire; what the tests hold is what the real Envoy, running the
platform's own proxy configuration, does with those answers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc
from envoy.type.v3 import http_status_pb2

HEALTH_SERVICE = "grpc.health.v1.Health"
# grpc.health.v1.HealthCheckResponse{status: SERVING}, serialized (field 1, varint 1).
_SERVING = b"\x08\x01"


@dataclass(frozen=True)
class Hold:
    """Never dispatch: the request waits until Envoy gives up on it."""


@dataclass(frozen=True)
class Pick:
    """Dispatch to `destination` ("host:port") after `after_seconds` in the queue."""

    destination: str
    after_seconds: float = 0.0


@dataclass(frozen=True)
class PickThenFail:
    """Dispatch to `destination`, then fail the stream when the server's answer comes (the EPP's
    process dying while the server answers)."""

    destination: str


@dataclass(frozen=True)
class Shed:
    """Refuse as the EPP's flow control does (429 for a TTL or a full band, 503 with no endpoints)."""

    status: int
    reason: str
    body: str = "inference error: ResourceExhausted - request timed out in queue"


Decision = Hold | Pick | PickThenFail | Shed


@dataclass
class Seen:
    """One request as the fake picker saw it."""

    headers: dict[str, str]
    body: bytes = b""
    decision: Decision | None = None
    # Set when Envoy closed the stream while the request was still held (the EPP then evicts it).
    cancelled: threading.Event = field(default_factory=threading.Event)
    # The response as Envoy sent it to the picker (the EPP reads it: usage, in-flight load).
    response_headers: dict[str, str] | None = None
    response_body: bytes = b""


def _headers(message: Any) -> dict[str, str]:
    return {h.key: (h.raw_value.decode() if h.raw_value else h.value) for h in message.headers.headers}


def _header(key: str, value: str) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key=key, raw_value=value.encode()))


class FakePicker(ext_proc_grpc.ExternalProcessorServicer):
    def __init__(self, decide: Callable[[dict[str, str]], Decision]) -> None:
        self.decide = decide
        self.seen: list[Seen] = []
        self.lock = threading.Lock()

    def Process(self, request_iterator: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:  # noqa: N802
        seen: Seen | None = None
        for message in request_iterator:
            kind = message.WhichOneof("request")
            if kind == "request_headers":
                seen = Seen(_headers(message.request_headers))
                with self.lock:
                    self.seen.append(seen)
                if message.request_headers.end_of_stream:
                    yield from self._decide(seen, context)
            elif kind == "request_body" and seen is not None:
                seen.body += message.request_body.body
                if message.request_body.end_of_stream:
                    yield from self._decide(seen, context)
            elif kind == "request_trailers":
                yield ext_proc.ProcessingResponse(request_trailers=ext_proc.TrailersResponse())
            elif kind == "response_headers":
                if seen is not None:
                    seen.response_headers = _headers(message.response_headers)
                    if isinstance(seen.decision, PickThenFail):
                        context.abort(grpc.StatusCode.UNAVAILABLE, "endpoint picker stopped")
                yield ext_proc.ProcessingResponse(response_headers=ext_proc.HeadersResponse())
            elif kind == "response_body":
                chunk = message.response_body
                if seen is not None:
                    seen.response_body += chunk.body
                streamed = ext_proc.StreamedBodyResponse(body=chunk.body, end_of_stream=chunk.end_of_stream)
                mutation = ext_proc.CommonResponse(body_mutation=ext_proc.BodyMutation(streamed_response=streamed))
                yield ext_proc.ProcessingResponse(response_body=ext_proc.BodyResponse(response=mutation))
            elif kind == "response_trailers":
                yield ext_proc.ProcessingResponse(response_trailers=ext_proc.TrailersResponse())

    def _decide(self, seen: Seen, context: grpc.ServicerContext) -> Iterator[Any]:
        decision = seen.decision = self.decide(seen.headers)
        if isinstance(decision, Hold):
            while context.is_active():
                time.sleep(0.02)
            seen.cancelled.set()
            return
        if isinstance(decision, Shed):
            yield ext_proc.ProcessingResponse(
                immediate_response=ext_proc.ImmediateResponse(
                    status=http_status_pb2.HttpStatus(code=decision.status),
                    headers=ext_proc.HeaderMutation(set_headers=[_header("x-llm-d-request-dropped-reason", decision.reason)]),
                    body=decision.body.encode(),
                )
            )
            return
        deadline = time.monotonic() + (decision.after_seconds if isinstance(decision, Pick) else 0)
        while time.monotonic() < deadline:
            if not context.is_active():
                seen.cancelled.set()
                return
            time.sleep(0.02)
        # The EPP names the pod and sets the length of the body it sends back (request.go
        # generateHeaders): without it Envoy forwards the streamed body chunked.
        headers = [
            _header("x-gateway-destination-endpoint", decision.destination),
            _header("content-length", str(len(seen.body))),
        ]
        picked = ext_proc.CommonResponse(header_mutation=ext_proc.HeaderMutation(set_headers=headers), clear_route_cache=True)
        yield ext_proc.ProcessingResponse(request_headers=ext_proc.HeadersResponse(response=picked))
        streamed = ext_proc.StreamedBodyResponse(body=seen.body, end_of_stream=True)
        body = ext_proc.CommonResponse(body_mutation=ext_proc.BodyMutation(streamed_response=streamed))
        yield ext_proc.ProcessingResponse(request_body=ext_proc.BodyResponse(response=body))


def _health(request: bytes, context: grpc.ServicerContext) -> bytes:
    return _SERVING


def serve(decide: Callable[[dict[str, str]], Decision], certificate: Path, key: Path) -> tuple[grpc.Server, FakePicker, int]:
    """The fake picker on a loopback port over TLS (the EPP's --secure-serving), with the gRPC
    health service Envoy's ext_proc cluster checks (the EPP's --health-checking)."""
    picker = FakePicker(decide)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    ext_proc_grpc.add_ExternalProcessorServicer_to_server(picker, server)
    health = grpc.unary_unary_rpc_method_handler(_health)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(HEALTH_SERVICE, {"Check": health}),))
    credentials = grpc.ssl_server_credentials([(key.read_bytes(), certificate.read_bytes())])
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    return server, picker, port
