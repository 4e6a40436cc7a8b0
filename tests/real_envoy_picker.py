"""An endpoint picker's proxy in the tests' real Envoy (tests/real_envoy.py): the rendered bootstrap bound to
loopback, its ext_proc cluster on a fake picker, the pods the picker names an echo upstream."""

from __future__ import annotations

import http.client
import json
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .envoy_upstreams import Response, Upstreams
from .real_envoy import _openssl, _start_envoy, _wait_admin_ready
from .servers.processes import free_ports, stop


@dataclass
class PickerProxy:
    """One running Envoy with an endpoint picker's proxy configuration (components/specs/
    endpoint_picker.py proxy_config), its fake picker and the servers' upstream."""

    process: subprocess.Popen[bytes]
    port: int  # the model listener's loopback port
    upstreams: Upstreams  # "servers": the version's Service and every pod the picker names
    picker: Any  # tests/servers/fake_picker.FakePicker, or None while the picker is down
    log_path: Path

    def send(self, headers: Mapping[str, str], body: bytes = b'{"model":"m"}', timeout: float = 30) -> Response:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request("POST", "/v1/chat/completions", body=body, headers={"content-type": "application/json", **headers})
            answer = connection.getresponse()
            return Response(answer.status, answer.getheaders(), answer.read())
        finally:
            connection.close()

    def server(self) -> str:
        """Where the servers' upstream listens, as the picker names a pod ("host:port")."""
        host, port = self.upstreams.address("servers")
        return f"{host}:{port}"


def _rebind(address: dict[str, Any], port: int) -> None:
    address["socket_address"].update(address="127.0.0.1", port_value=port)


@contextmanager
def running_picker_proxy(bootstrap: dict[str, Any], decide: Callable[[dict[str, str]], Any] | None) -> Iterator[PickerProxy]:
    """Envoy running `bootstrap` as rendered, but bound to loopback: its listeners and admin on
    free ports, and its ext_proc cluster on a fake picker over TLS (`decide` answers each request;
    None: no picker listens, as when the EPP is down); the pods the picker names are an echo
    upstream. Only addresses are changed."""
    from .servers import fake_picker

    config = json.loads(json.dumps(bootstrap))
    upstreams = Upstreams(["servers"])
    upstreams.start()
    with tempfile.TemporaryDirectory(prefix="picker-proxy-") as work:
        directory = Path(work)
        ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
        cert, key = directory / "epp.crt", directory / "epp.key"
        _openssl("req", "-x509", *ec, "-days", "1", "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert))
        server, picker, picker_port = (None, None, free_ports(1)[0])
        if decide is not None:
            server, picker, picker_port = fake_picker.serve(decide, cert, key)
        listeners = config["static_resources"]["listeners"]
        admin, *ports = free_ports(1 + len(listeners))
        _rebind(config["admin"]["address"], admin)
        model_port = 0
        for listener, port in zip(listeners, ports, strict=True):
            _rebind(listener["address"], port)
            if listener["name"] == "vllm":
                model_port = port
        host = upstreams.address("servers")[0]
        for cluster in config["static_resources"]["clusters"]:
            endpoints = cluster.get("load_assignment", {}).get("endpoints", [])
            for endpoint in (e["endpoint"] for group in endpoints for e in group["lb_endpoints"]):
                target = {"ext_proc": picker_port, "prometheus_stats": admin}[cluster["name"]]
                endpoint["address"]["socket_address"].update(address=host, port_value=target)
        process, log_path = _start_envoy(json.dumps(config), directory)
        proxy = PickerProxy(process, model_port, upstreams, picker, log_path)
        try:
            _wait_admin_ready(process, admin, log_path)
            yield proxy
        finally:
            stop(process)
            if server is not None:
                server.stop(0)
            upstreams.stop()
