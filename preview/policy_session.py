"""The exchange the CLI has with a policy pack during `pulumi preview --policy-pack`, run beside the program."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
from array import array
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.struct_pb2 import Struct
from pulumi.runtime.proto import analyzer_pb2

from . import policy_wire
from .engine import RecordedResource
from .policy_client import ANALYZE, ANALYZED, ENTRY, ERROR, PORT, STACK, frame, read_frame
from .policy_runner import (
    LEVELS,
    PERFORMANCE_POLICY,
    PolicyPack,
    PolicyPackError,
    PolicyRun,
    pack_version,
    process_cpu_seconds,
    response_diagnostics,
    wire_struct,
)
from .stack_config import StackConfig

PROVIDER_PREFIX = "pulumi:providers:"


def _declared_by(info: analyzer_pb2.AnalyzerInfo, overrides: dict[str, Any], preview_levels: dict[str, str]) -> dict[str, Any]:
    """The overrides with the preview's own levels (preview_levels: advisory), without the preview's own entries
    (those and PERFORMANCE_POLICY's) for a policy the pack does not declare: a pull request's preview runs the
    default branch's pack, which may predate them, and a misspelt policy a user names is still refused
    (policy_runner._validate_overrides)."""
    declared = {p.name for p in info.policies}
    own = {*preview_levels, PERFORMANCE_POLICY} - declared
    merged = {**overrides, **{name: {"enforcementLevel": "advisory"} for name in preview_levels}}
    return {k: v for k, v in merged.items() if k not in own}


class PolicySession:
    """The exchange the CLI has with a pack during `pulumi preview --policy-pack`, run as the CLI
    runs it: beside the program. A thread of its own (`start`) connects (the pack imports its SDK while the
    program starts) and configures the pack; each custom resource is handed, as soon as the program
    registers it, to the protocol's client, a process of its own (preview/policy_client.py), as the bytes
    of its AnalyzeRequest and of its entry in the stack's (preview/policy_wire.py), so the pack works on
    the other core while the program is still being evaluated: built where the program runs
    (`requests_for`, in the program's own process: preview/evaluation_process.py) and sent from here
    (`forward`); `submit` does both, for a program evaluated in this process.
    `analyze_stack` hands the client the stack's order once the program is done (the pack checks the
    stack while the preview renders), and `result` waits for the verdict. `result` and `close` stop
    the pack; `close` also ends the exchange early (the program failed, or the preview stops before
    the stack is analyzed).
    """

    def __init__(
        self,
        pack: PolicyPack,
        project_dir: Path,
        stack_config: StackConfig,
        overrides: dict[str, Any] | None = None,
        preview_levels: dict[str, str] | None = None,
        in_flight: int = 16,
    ):
        """`overrides` is the policy config; `preview_levels` the policies this preview alone runs advisory
        (policy → why, preview/inputs.py image_digests_offline), which its report says apart."""
        self.pack = pack
        self._preview_levels = preview_levels or {}
        config = stack_config
        self._client_errors = tempfile.TemporaryFile()
        self._client = subprocess.Popen(
            [sys.executable, "-P", str(Path(__file__).with_name("policy_client.py")), str(in_flight)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._client_errors,
        )
        self._lock = threading.Lock()
        # The URN of each AnalyzeRequest sent, by its number; the number of each resource's stack entry sent; the
        # providers' AnalyzerProviderResource, by URN.
        self._urns: list[str] = []
        self._entries: dict[str, int] = {}
        self._providers: dict[str, bytes] = {}
        self._broken = False
        self._run: PolicyRun | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._work,
            args=(project_dir, config.project, config.stack, config.values, config.secret_keys, overrides or {}),
            name="policy-pack",
            daemon=True,
        )

    def start(self) -> None:
        """The exchange begins: the thread connects to the pack and configures it. Called once the program's process
        is forked (preview/evaluation_process.py): the thread imports modules as it goes (gRPC's channel, jsonschema),
        and a module lock held by a thread at a fork stays held in the child. Once; a session never started is
        closed as it is."""
        if self._thread.ident is None:
            self._thread.start()

    def submit(self, resource: RecordedResource, provider: RecordedResource | None, inputs: Struct, state: Struct) -> None:
        """Called for every registration, from the mock engine's threads: a custom resource's requests to the client
        (a provider's kept for the resources that name it)."""
        built = self.requests_for(resource, provider, inputs, state)
        if built is not None:
            self.forward(*built)

    def requests_for(
        self, resource: RecordedResource, provider: RecordedResource | None, inputs: Struct, state: Struct
    ) -> tuple[str, bytes, bytes] | None:
        """A custom resource's URN, the bytes of its AnalyzeRequest and of its entry in the stack's; None for a
        provider (kept for the resources that name it) or a component. Takes no lock: the program's own process calls
        it (preview/evaluation_process.py), where the session's lock may have been held by another thread at the
        fork."""
        if resource.type.startswith(PROVIDER_PREFIX):
            wire = policy_wire.properties(inputs, resource.inputs)
            self._providers[resource.urn] = policy_wire.provider_resource(resource, wire)
            return None
        if not resource.custom:
            return None
        provider_bytes = None
        if provider is not None:
            provider_bytes = self._providers.get(provider.urn) or policy_wire.provider_resource(
                provider, wire_struct(provider.inputs).SerializeToString()
            )
        request = policy_wire.analyze_request(resource, policy_wire.properties(inputs, resource.inputs), provider_bytes)
        return resource.urn, request, policy_wire.stack_entry(resource, policy_wire.properties(state, resource.outputs))

    def forward(self, urn: str, request: bytes, entry: bytes) -> None:
        """A custom resource's requests, numbered in the order they come, to the client."""
        with self._lock:
            number = len(self._urns)
            self._urns.append(urn)
            self._entries[urn] = len(self._entries)
            self._send(frame(ANALYZE, number, request) + frame(ENTRY, self._entries[urn], entry))

    def analyze_stack(self, resources: list[RecordedResource]) -> None:
        """The program is done: after the last resource, the stack (components included) in the order given."""
        with self._lock:
            order = array("I")
            extra = []
            for r in resources:
                if r.type.startswith(PROVIDER_PREFIX):
                    continue
                if r.urn not in self._entries:
                    self._entries[r.urn] = len(self._entries)
                    entry = policy_wire.stack_entry(r, wire_struct(r.outputs).SerializeToString())
                    extra.append(frame(ENTRY, self._entries[r.urn], entry))
                order.append(self._entries[r.urn])
            self._send(b"".join(extra) + frame(STACK, 0, order.tobytes()))

    def _send(self, data: bytes) -> None:
        """To the client (under the lock); a client that is gone is reported by `result`."""
        if self._broken or self._client.stdin is None:
            return
        try:
            self._client.stdin.write(data)
            self._client.stdin.flush()
        except OSError:
            self._broken = True

    def result(self) -> PolicyRun:
        self.start()
        self._thread.join()
        try:
            if self._error is not None:
                raise self._error
            assert self._run is not None
            self._answers(self._run)
            cpu = {"policyPack": self.pack.cpu_seconds(), "policyClient": process_cpu_seconds(self._client.pid)}
            self._run.cpu_seconds.update({name: seconds for name, seconds in cpu.items() if seconds is not None})
            return self._run
        finally:
            self._stop_client()
            self.pack.close()

    def _answers(self, run: PolicyRun) -> None:
        """The client's answers: each resource's diagnostics (sorted: resources arrive in the engine's order, which
        varies between runs), then the stack's."""
        assert self._client.stdout is not None
        pack, resource_diagnostics = self.pack, []
        while (item := read_frame(self._client.stdout)) is not None:
            kind, number, data = item
            if kind == ERROR:
                raise PolicyPackError(data.decode(errors="replace"))
            response = analyzer_pb2.AnalyzeResponse.FromString(data)
            if kind == ANALYZED:
                # Like the CLI: a resource policy's diagnostic belongs to the resource analyzed.
                for diagnostic in response_diagnostics(response, pack.secrets):
                    diagnostic.urn = diagnostic.urn or self._urns[number]
                    resource_diagnostics.append(diagnostic)
                continue
            run.analyzed = len(self._urns)
            run.diagnostics = sorted(resource_diagnostics, key=lambda d: (d.urn, d.policy, d.message))
            run.diagnostics += response_diagnostics(response, pack.secrets)
            # Logged from concurrent calls: sorted, so reports diff cleanly.
            run.engine_log = sorted(pack.engine_log)
            return
        self._stop_client()
        self._client_errors.seek(0)
        error = self._client_errors.read().decode(errors="replace")
        raise PolicyPackError(f"the policy pack's client exited with code {self._client.returncode}:\n{error}")

    def _stop_client(self) -> None:
        with self._lock:
            self._broken = True
            if self._client.stdin is not None and not self._client.stdin.closed:
                try:
                    self._client.stdin.close()
                except OSError:
                    pass
        try:
            self._client.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._client.kill()
            self._client.wait()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the exchange wherever it is and the pack with it (safe after `result`)."""
        if self._client.poll() is None:
            self._client.kill()
        self._stop_client()
        # Stopping the process also ends a connect still waiting for its port, and fails calls
        # in flight.
        self.pack.close()
        if self._thread.ident is not None:
            self._thread.join(timeout)

    def _work(self, project_dir, project, stack, config, secret_keys, overrides) -> None:
        try:
            self._run = self._configure(project_dir, project, stack, config, secret_keys, overrides)
            with self._lock:
                self._send(frame(PORT, 0, str(self.pack.port).encode()))
        except (PolicyPackError, grpc.RpcError) as error:
            self._error = error
        except Exception as error:  # noqa: BLE001 - whatever broke, the caller reports the pack as failed
            wrapped = PolicyPackError(f"talking to the policy pack failed: {error!r}")
            wrapped.__cause__ = error
            self._error = wrapped

    def _configure(self, project_dir, project, stack, config, secret_keys, overrides) -> PolicyRun:
        pack = self.pack
        pack.connect()
        pack.handshake(project_dir)
        pack.configure_stack(project, stack, config, secret_keys)
        info = pack.info()
        levels = pack.configure(info, _declared_by(info, overrides, self._preview_levels))
        return PolicyRun(
            pack=info.name,
            version=pack_version(pack.pack_dir, info.version),
            policies=[
                {
                    "name": p.name,
                    "level": levels[p.name],
                    "declaredLevel": LEVELS[p.enforcementLevel],
                    "description": p.description,
                }
                for p in info.policies
            ],
            preview_levels={name: why for name, why in self._preview_levels.items() if name in levels},
        )
