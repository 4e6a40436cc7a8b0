"""The exchange the CLI has with a policy pack during `pulumi preview --policy-pack`, run beside the program."""

from __future__ import annotations

import queue
import threading
from collections import deque
from pathlib import Path
from typing import Any

import grpc
from pulumi.runtime.proto import analyzer_pb2

from .engine import RecordedResource
from .policy_runner import (
    LEVELS,
    PERFORMANCE_POLICY,
    Diagnostic,
    PolicyPack,
    PolicyPackError,
    PolicyRun,
    pack_version,
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


_STOP = object()


class _Stopped(Exception):
    """The session was closed before the exchange finished."""


class PolicySession:
    """The exchange the CLI has with a pack during `pulumi preview --policy-pack`, run as the CLI
    runs it: beside the program. A thread of its own connects (the pack imports its SDK while the
    program starts), configures the pack, then analyzes each custom resource as soon as the
    program registers it (`submit`), so the pack works on the other core while the program is
    still being evaluated; `analyze_stack` hands it the whole stack once the program is done, and
    `result` waits for the verdict. `result` and `close` stop the pack; `close` also ends the
    exchange early (the program failed, or the preview stops before the stack is analyzed).
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
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._run: PolicyRun | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._work,
            args=(project_dir, config.project, config.stack, config.values, config.secret_keys, overrides or {}, in_flight),
            name="policy-pack",
            daemon=True,
        )
        self._thread.start()

    def submit(self, resource: RecordedResource, provider: RecordedResource | None) -> None:
        """Called for every registration, from the mock engine's threads: queue custom resources."""
        if resource.custom and not resource.type.startswith(PROVIDER_PREFIX):
            self._queue.put((resource, provider))

    def analyze_stack(self, resources: list[RecordedResource]) -> None:
        """The program is done: after the last resource, analyze the stack (components included)."""
        self._queue.put([r for r in resources if not r.type.startswith(PROVIDER_PREFIX)])

    def result(self) -> PolicyRun:
        self._thread.join()
        cpu = self.pack.cpu_seconds()
        self.pack.close()
        if self._error is not None:
            raise self._error
        assert self._run is not None
        if cpu is not None:
            self._run.cpu_seconds["policyPack"] = cpu
        return self._run

    def close(self, timeout: float = 10.0) -> None:
        """Stop the exchange wherever it is and the pack with it (safe after `result`)."""
        self._queue.put(_STOP)
        # Stopping the process also ends a connect still waiting for its port, and fails calls
        # in flight.
        self.pack.close()
        self._thread.join(timeout)

    def _work(self, project_dir, project, stack, config, secret_keys, overrides, in_flight) -> None:
        try:
            self._run = self._exchange(project_dir, project, stack, config, secret_keys, overrides, in_flight)
        except _Stopped:
            pass
        except (PolicyPackError, grpc.RpcError) as error:
            self._error = error
        except Exception as error:  # noqa: BLE001 - whatever broke, the caller reports the pack as failed
            wrapped = PolicyPackError(f"talking to the policy pack failed: {error!r}")
            wrapped.__cause__ = error
            self._error = wrapped

    def _exchange(self, project_dir, project, stack, config, secret_keys, overrides, in_flight) -> PolicyRun:
        pack = self.pack
        pack.connect()
        pack.handshake(project_dir)
        pack.configure_stack(project, stack, config, secret_keys)
        info = pack.info()
        levels = pack.configure(info, _declared_by(info, overrides, self._preview_levels))
        run = PolicyRun(
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
        # A bounded window of calls in flight (the CLI analyzes steps concurrently too), so the
        # pack's server never queues thousands of calls.
        window: deque[tuple[RecordedResource, Any]] = deque()
        resource_diagnostics: list[Diagnostic] = []
        while True:
            item = self._queue.get()
            if item is _STOP:
                raise _Stopped
            if isinstance(item, list):
                break
            resource, provider = item
            window.append((resource, pack.stub.Analyze.future(pack._analyze_request(resource, provider))))
            run.analyzed += 1
            if len(window) >= in_flight:
                done, call = window.popleft()
                resource_diagnostics += pack._analyzed(done, call.result())
        while window:
            done, call = window.popleft()
            resource_diagnostics += pack._analyzed(done, call.result())
        # Resources arrive in the engine's order, which varies between runs: report them sorted.
        run.diagnostics = sorted(resource_diagnostics, key=lambda d: (d.urn, d.policy, d.message))
        run.diagnostics += pack.analyze_stack(item)
        # Logged from concurrent calls: sorted, so reports diff cleanly.
        run.engine_log = sorted(pack.engine_log)
        return run
