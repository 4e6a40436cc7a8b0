"""Echo upstreams on loopback for the tests' real Envoy (tests/real_envoy.py): each records every request it
receives and answers as the test says; and the response a client of that Envoy gets."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Received:
    """One request as an upstream received it."""

    upstream: str
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        values = self.all(name)
        return values[0] if values else None

    def all(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def json(self) -> Any:
        return json.loads(self.body)


# What an upstream answers: status, headers, body. The default is 200 and a short JSON body.
Answer = Callable[[Received], tuple[int, dict[str, str], bytes]]


def ok(_: Received) -> tuple[int, dict[str, str], bytes]:
    return 200, {"content-type": "application/json"}, b'{"ok":true}'


@dataclass
class Upstreams:
    """Echo servers on loopback, one per name, each recording every request it receives."""

    names: list[str]
    received: list[Received] = field(default_factory=list)
    answers: dict[str, Answer] = field(default_factory=dict)
    servers: dict[str, http.server.ThreadingHTTPServer] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        for name in self.names:
            self.servers[name] = self._server(name)

    def _server(self, name: str) -> http.server.ThreadingHTTPServer:
        upstreams = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # answers in one segment: no delayed-ACK stall per request

            def _body(self) -> bytes:
                if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
                    # As uvicorn reads it: an endpoint picker's proxy forwards a streamed body chunked.
                    chunks = []
                    while size := int(self.rfile.readline().split(b";")[0].strip(), 16):
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                length = int(self.headers.get("content-length") or 0)
                return self.rfile.read(length) if length else b""

            def _handle(self) -> None:
                body = self._body()
                got = Received(name, self.command, self.path, list(self.headers.items()), body)
                with upstreams.lock:
                    upstreams.received.append(got)
                status, headers, out = upstreams.answers.get(name, ok)(got)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = do_PUT = do_DELETE = _handle

            def log_message(self, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def address(self, name: str) -> tuple[str, int]:
        host, port = self.servers[name].server_address[:2]
        return str(host), int(port)

    def take(self) -> list[Received]:
        with self.lock:
            got, self.received[:] = list(self.received), []
        return got

    def stop(self) -> None:
        for server in self.servers.values():
            server.shutdown()
            server.server_close()


@dataclass
class Response:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)
