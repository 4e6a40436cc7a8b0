# Long module: the analyzer protocol as the CLI speaks it: the pack's process, each call and request, the policy config's checks.
"""Run a Python policy pack exactly as the Pulumi CLI does, and speak the analyzer protocol.

The CLI starts `pulumi-analyzer-policy-python <engine-address> <pack-dir>`, i.e. the pack's
virtualenv python running `python -u -m pulumi.policy <engine-address> <pack-dir>` in the pack's
folder, with the stack's config in PULUMI_CONFIG. The pack prints the port of its gRPC Analyzer
service on stdout. Then: Handshake (older packs answer UNIMPLEMENTED), ConfigureStack,
GetAnalyzerInfo, Configure (each policy's enforcement level and config, defaults filled in from
its schema), Analyze for every custom resource (inputs), AnalyzeStack once (every resource,
components included, with their outputs).

The exchange as the preview runs it, beside the program: policy_session.py; the secrets kept out of what the pack
says: masking.py.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import grpc
import yaml
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime import rpc
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc, engine_pb2_grpc

from .engine import RecordedResource
from .masking import mask_secrets, secret_values

LEVELS = {value: name.lower() for name, value in analyzer_pb2.EnforcementLevel.items()}
LEVEL_VALUES = {name.lower(): value for name, value in analyzer_pb2.EnforcementLevel.items()}
# How long closing the channel to the pack may wait (see PolicyPack._close_channel).
CHANNEL_CLOSE_SECONDS = 5
UNKNOWN = rpc.UNKNOWN


class PolicyPackError(Exception):
    """The pack cannot be started or talked to."""


class PolicyConfigError(PolicyPackError):
    """The policy config given does not fit the pack."""


@dataclass
class Diagnostic:
    policy: str
    level: str
    message: str
    urn: str
    description: str = ""

    def to_json(self) -> dict[str, str]:
        return {"policy": self.policy, "level": self.level, "message": self.message, "urn": self.urn}


# The pack's policy that reads the preview's Serving performance verdicts (preview/performance.py): the preview's own
# run disables it and holds the servers in that stage instead, so its level there is no weakening.
PERFORMANCE_POLICY = "serving-performance"


@dataclass
class PolicyRun:
    pack: str
    version: str
    # Each policy's name, description, the level the pack declares and the level it ran at.
    policies: list[dict[str, str]]
    diagnostics: list[Diagnostic] = field(default_factory=list)
    analyzed: int = 0
    engine_log: list[str] = field(default_factory=list)
    # The levels this preview alone set (policy → why; preview/inputs.py image_digests_offline), not the policy
    # config: `pulumi up` runs those policies at the pack's own level.
    preview_levels: dict[str, str] = field(default_factory=dict)
    # CPU seconds each process of the exchange used, from its start (PolicyPack.cpu_seconds).
    cpu_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def warnings(self) -> list[str]:
        """The mandatory policies the policy config weakened: a preview that passes with them says less than the
        pack promises; and those this preview alone weakened where they found something, which `pulumi up` fails."""
        weakened = [
            f"policy {p['name']} is mandatory in the pack but {p['level']} by the policy config: "
            + ("it did not run" if p["level"] == "disabled" else "its violations do not fail the preview")
            for p in self.policies
            if p["declaredLevel"] == "mandatory"
            and p["level"] != "mandatory"
            and p["name"] != PERFORMANCE_POLICY
            and p["name"] not in self.preview_levels
        ]
        found = {d.policy for d in self.diagnostics}
        return weakened + [
            f"policy {name} is mandatory in the pack but advisory in this preview alone: {why}"
            for name, why in self.preview_levels.items()
            if name in found
        ]

    @property
    def mandatory(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.level in ("mandatory", "remediate")]


class _EngineLog(engine_pb2_grpc.EngineServicer):
    """The engine side of the address handed to the pack: collects what it logs."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def Log(self, request, context):  # noqa: N802 - gRPC method name
        self.messages.append(request.message)
        return empty_pb2.Empty()


def pack_python(pack_dir: Path) -> Path:
    """The interpreter PulumiPolicy.yaml's `runtime.options.virtualenv` names, as the CLI uses it."""
    manifest = yaml.safe_load((pack_dir / "PulumiPolicy.yaml").read_text())
    runtime = manifest.get("runtime")
    options = runtime.get("options", {}) if isinstance(runtime, dict) else {}
    venv = options.get("virtualenv")
    if not venv:
        return Path(sys.executable)
    # Not resolve(): the venv python is a symlink, and following it would leave the venv.
    python = (pack_dir / venv / "bin" / "python").absolute()
    if not python.exists():
        raise PolicyPackError(
            f"the policy pack's virtualenv {pack_dir / venv} does not exist: run `make policy-venv` "
            f"(python -m venv {pack_dir / venv} && {pack_dir / venv}/bin/pip install -r {pack_dir}/requirements.txt)"
        )
    return python


def wire_struct(value: dict[str, Any]) -> struct_pb2.Struct:
    """A recorded value as the engine sends it to the pack: its wire form (wire_value) in a protobuf Struct."""
    out = struct_pb2.Struct()
    out.update(wire_value(value))
    return out


def wire_value(value: Any) -> Any:
    """Recorded values in the engine's wire form (secrets keep their signature; unknowns are the
    unknown sentinel; whole numbers are numbers)."""
    if isinstance(value, dict):
        return {str(k): wire_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [wire_value(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return UNKNOWN


# Linux caps one environment string at 128 KiB, and a stack with hundreds of models has config
# values larger than that: such values are left out of PULUMI_CONFIG (the pack reads only small
# keys from it) and still sent in ConfigureStack.
ENV_CONFIG_VALUE_LIMIT = 16 * 1024


def env_config(config: dict[str, str]) -> dict[str, str]:
    """The stack config the pack finds in PULUMI_CONFIG."""
    return {key: value for key, value in config.items() if len(value) <= ENV_CONFIG_VALUE_LIMIT}


def _schema_defaults(schema: analyzer_pb2.PolicyConfigSchema | None) -> dict[str, Any]:
    if schema is None:
        return {}
    properties = json_format.MessageToDict(schema.properties)
    return {name: spec["default"] for name, spec in properties.items() if isinstance(spec, dict) and "default" in spec}


def _type_name(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}.get(
        type(value), type(value).__name__
    )


def _validate_overrides(info: analyzer_pb2.AnalyzerInfo, overrides: dict[str, Any]) -> None:
    """Every override against the policy's config schema, as the Pulumi CLI checks
    `--policy-pack-config` (pulumi/pulumi pkg/resource/analyzer/config.go:
    ReconcilePolicyPackConfig, validatePolicyConfig: JSON schema of type object with the policy's
    properties), and stricter: a key the schema does not declare is an error too (the CLI lets it by),
    since a misspelt key would otherwise leave the default silently in force."""
    from jsonschema import Draft7Validator

    check_policy_config(overrides)
    policies = {p.name: p for p in info.policies}
    unknown = sorted(set(overrides) - set(policies) - {"all"})
    if unknown:
        raise PolicyConfigError(
            f"the policy config names no policy of this pack: {', '.join(unknown)}; policies: all, {', '.join(sorted(policies))}"
        )
    for name, override in overrides.items():
        if not isinstance(override, dict):
            continue
        schema = policies[name].configSchema if name in policies and policies[name].HasField("configSchema") else None
        properties = json_format.MessageToDict(schema.properties) if schema is not None else {}
        for key, value in override.items():
            if key == "enforcementLevel":
                continue
            if key not in properties:
                allowed = ", ".join(["enforcementLevel", *sorted(properties)])
                raise PolicyConfigError(f"policy config {name!r}: unknown key {key!r}; allowed: {allowed}")
            spec = {k: v for k, v in properties[key].items() if k != "default"}
            error = next(iter(Draft7Validator(spec).iter_errors(value)), None)
            if error is not None:
                expected = json.dumps(spec, sort_keys=True)
                raise PolicyConfigError(
                    f"policy config {name!r}: {key!r} is {_type_name(value)} {json.dumps(value)[:80]}, but the policy "
                    f"takes {expected} ({error.message[:120]})"
                )


class PolicyPack:
    """A running policy pack process and a client for its Analyzer service.

    Starting it only spawns the process (the pack imports its SDK meanwhile, so the preview
    starts it before evaluating the program); `connect` waits for its port.
    """

    def __init__(self, pack_dir: Path, stack_config: dict[str, str], project: str, stack: str):
        self.pack_dir = pack_dir.resolve()
        self.channel: grpc.Channel | None = None
        self.port: int | None = None
        # The stack's secret values (from ConfigureStack), masked out of every message the pack sends.
        self.secrets: list[str] = []
        self._engine = _EngineLog()
        self._engine_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        engine_pb2_grpc.add_EngineServicer_to_server(self._engine, self._engine_server)
        engine_port = self._engine_server.add_insecure_port("127.0.0.1:0")
        self._engine_server.start()
        env = {
            **os.environ,
            "PULUMI_CONFIG": json.dumps(env_config(stack_config)),
            "PULUMI_PROJECT": project,
            "PULUMI_STACK": stack,
            "PULUMI_DRY_RUN": "true",
            "PYTHONUNBUFFERED": "1",
        }
        env.pop("PYTHONPATH", None)
        command = [str(pack_python(self.pack_dir)), "-u", "-m", "pulumi.policy", f"127.0.0.1:{engine_port}", str(self.pack_dir)]
        self.process = subprocess.Popen(
            command, cwd=self.pack_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def connect(self, timeout: float = 120.0) -> PolicyPack:
        self.port = port = self._read_port(timeout)
        self.channel = grpc.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", 400 * 1024 * 1024)]
        )
        self.stub = analyzer_pb2_grpc.AnalyzerStub(self.channel)
        # Ready once a first call gets through (wait_for_ready), not through grpc.channel_ready_future: its thread
        # polls the channel's state every 0.2 s and raises on stderr, a traceback, if the channel is closed meanwhile
        # (grpcio 1.85.3 _channel.py `_poll_connectivity`), which is what a preview stopped by a config error does
        # while its session connects. A close during this call fails the call instead.
        self.stub.GetPluginInfo(empty_pb2.Empty(), wait_for_ready=True, timeout=timeout)
        return self

    def _read_port(self, timeout: float) -> int:
        assert self.process.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(self.process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if selector.select(timeout=0.5):
                line = self.process.stdout.readline().strip()
                if line.isdigit():
                    return int(line)
                if line:
                    continue
            if self.process.poll() is not None:
                error = self.process.stderr.read() if self.process.stderr else ""
                raise PolicyPackError(f"the policy pack exited with code {self.process.returncode} before serving:\n{error}")
        self.close()
        raise PolicyPackError(f"the policy pack printed no port within {timeout:.0f} s")

    # --- the protocol ------------------------------------------------------------------------

    def handshake(self, project_dir: Path) -> None:
        try:
            self.stub.Handshake(
                analyzer_pb2.AnalyzerHandshakeRequest(
                    engine_address="", root_directory=str(project_dir), program_directory=str(self.pack_dir)
                )
            )
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise

    def configure_stack(self, project: str, stack: str, config: dict[str, str], secret_keys: list[str]) -> None:
        self.secrets = secret_values(config, secret_keys)
        self.stub.ConfigureStack(
            analyzer_pb2.AnalyzerStackConfigureRequest(
                stack=stack,
                project=project,
                organization="organization",
                dry_run=True,
                config=config,
                config_secret_keys=secret_keys,
            )
        )

    def info(self) -> analyzer_pb2.AnalyzerInfo:
        return self.stub.GetAnalyzerInfo(empty_pb2.Empty())

    def configure(self, info: analyzer_pb2.AnalyzerInfo, overrides: dict[str, Any]) -> dict[str, str]:
        """Each policy's level and config (configure_request), sent to the pack. The level each policy runs at."""
        request, levels = configure_request(info, overrides)
        self.stub.Configure(request)
        return levels

    def analyze(self, resource: RecordedResource, provider: RecordedResource | None) -> list[Diagnostic]:
        return self._analyzed(resource, self.stub.Analyze(analyze_request(resource, provider)))

    def _analyzed(self, resource: RecordedResource, response: analyzer_pb2.AnalyzeResponse) -> list[Diagnostic]:
        diagnostics = self._diagnostics(response)
        for diagnostic in diagnostics:
            # Like the CLI: a resource policy's diagnostic belongs to the resource analyzed.
            diagnostic.urn = diagnostic.urn or resource.urn
        return diagnostics

    def analyze_stack(self, resources: Iterable[RecordedResource]) -> list[Diagnostic]:
        return self._diagnostics(self.stub.AnalyzeStack(stack_request(resources)))

    def _diagnostics(self, response: analyzer_pb2.AnalyzeResponse) -> list[Diagnostic]:
        return response_diagnostics(response, self.secrets)

    def cpu_seconds(self) -> float | None:
        """The CPU time (user and system) the pack's process has used so far; None where /proc cannot tell."""
        return process_cpu_seconds(self.process.pid)

    def close(self) -> None:
        if self.channel is not None:
            self._close_channel(self.channel)
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        self._engine_server.stop(0)

    @staticmethod
    def _close_channel(channel: grpc.Channel) -> None:
        """Close the channel, waiting at most CHANNEL_CLOSE_SECONDS: closing waits for its calls' threads,
        and where the process could start no more threads (a program that crashed with "can't start new
        thread") that wait never ends. The process ends right after (preview/__main__.py)."""
        try:
            closer = threading.Thread(target=channel.close, name="close-policy-channel", daemon=True)
            closer.start()
        except RuntimeError:
            return
        closer.join(CHANNEL_CLOSE_SECONDS)

    @property
    def engine_log(self) -> list[str]:
        return [mask_secrets(message, self.secrets) for message in self._engine.messages]


def analyze_request(resource: RecordedResource, provider: RecordedResource | None) -> analyzer_pb2.AnalyzeRequest:
    """A custom resource's AnalyzeRequest: its inputs in their wire form, and its provider's."""
    request = analyzer_pb2.AnalyzeRequest(
        type=resource.type,
        properties=wire_struct(resource.inputs),
        urn=resource.urn,
        name=resource.name,
        options=analyzer_pb2.AnalyzerResourceOptions(parent=resource.parent or ""),
    )
    if provider is not None:
        request.provider.CopyFrom(
            analyzer_pb2.AnalyzerProviderResource(
                type=provider.type, properties=wire_struct(provider.inputs), urn=provider.urn, name=provider.name
            )
        )
    return request


def stack_request(resources: Iterable[RecordedResource]) -> analyzer_pb2.AnalyzeStackRequest:
    """The AnalyzeStackRequest: every resource given, in that order, with its outputs in their wire form."""
    return analyzer_pb2.AnalyzeStackRequest(
        resources=[
            analyzer_pb2.AnalyzerResource(
                type=r.type,
                properties=wire_struct(r.outputs),
                urn=r.urn,
                name=r.name,
                options=analyzer_pb2.AnalyzerResourceOptions(parent=r.parent or ""),
                parent=r.parent or "",
                dependencies=r.dependencies,
            )
            for r in resources
        ]
    )


def process_cpu_seconds(pid: int) -> float | None:
    """A running process's CPU time so far (user and system, fields 14 and 15 of Linux's /proc/<pid>/stat,
    proc(5)), or None where there is no such file."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 3)


def configure_request(
    info: analyzer_pb2.AnalyzerInfo, overrides: dict[str, Any]
) -> tuple[analyzer_pb2.ConfigureAnalyzerRequest, dict[str, str]]:
    """Each policy's level and config: the schema's defaults, then the user's overrides
    (the same JSON as `pulumi preview --policy-pack-config`; `all` sets every policy's level),
    checked against the policies' config schemas first. The Configure request, and the level each policy runs at."""
    _validate_overrides(info, overrides)
    every = overrides.get("all")
    policy_config = {}
    levels = {}
    for policy in info.policies:
        override = overrides.get(policy.name, {})
        if isinstance(override, str):
            override = {"enforcementLevel": override}
        if every is not None and "enforcementLevel" not in override:
            override = {**override, "enforcementLevel": every if isinstance(every, str) else every.get("enforcementLevel")}
        level = override.get("enforcementLevel")
        properties = {**_schema_defaults(policy.configSchema if policy.HasField("configSchema") else None)}
        properties.update({k: v for k, v in override.items() if k != "enforcementLevel"})
        policy_config[policy.name] = analyzer_pb2.PolicyConfig(
            enforcementLevel=LEVEL_VALUES[level] if level else policy.enforcementLevel,
            properties=wire_struct(properties),
        )
        levels[policy.name] = level or LEVELS[policy.enforcementLevel]
    return analyzer_pb2.ConfigureAnalyzerRequest(policyConfig=policy_config), levels


def response_diagnostics(response: analyzer_pb2.AnalyzeResponse, secrets: list[str]) -> list[Diagnostic]:
    """What the pack answered, as the report reads it: each diagnostic's level by name, `secrets` (and credentials of
    the known formats) masked out of its message."""
    return [
        Diagnostic(
            policy=d.policyName,
            level=LEVELS[d.enforcementLevel],
            message=mask_secrets(d.message, secrets),
            urn=d.urn,
            description=d.description,
        )
        for d in response.diagnostics
    ]


def check_policy_config(overrides: Any) -> None:
    """The shape of a `--policy-pack-config` file: {policy or "all": level | {enforcementLevel, ...}}."""
    if not isinstance(overrides, dict):
        raise PolicyConfigError("the policy config must be a JSON object keyed by policy name")
    for name, value in overrides.items():
        if not isinstance(value, (str, dict)):
            raise PolicyConfigError(f"policy config {name!r}: give an enforcement level or an object")
        level = value if isinstance(value, str) else value.get("enforcementLevel")
        if level is not None and (not isinstance(level, str) or level not in LEVEL_VALUES):
            raise PolicyConfigError(
                f"policy config {name!r}: unknown enforcement level {level!r:.80}; allowed: {', '.join(LEVEL_VALUES)}"
            )
        if name == "all" and isinstance(value, dict) and set(value) - {"enforcementLevel"}:
            raise PolicyConfigError("policy config 'all' sets every policy's enforcementLevel and takes no other key")


def pack_version(pack_dir: Path, reported: str) -> str:
    """Like the CLI: PulumiPolicy.yaml's version wins over what the SDK reports."""
    manifest = yaml.safe_load((pack_dir / "PulumiPolicy.yaml").read_text()) or {}
    return str(manifest.get("version") or reported)
