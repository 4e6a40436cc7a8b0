"""Run the unmodified Pulumi program under the SDK's own mock engine and record every resource.

`pulumi.runtime.set_mocks` replaces the resource monitor; our monitor subclass records each
registration (components and the stack too) with its parent, provider and inputs exactly as the
provider would receive them, and the outputs components register. Computed outputs a real
provider would return (an EKS endpoint, a node group's ASG name) come from `PreviewMocks`.
"""

from __future__ import annotations

import contextlib
import runpy
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pulumi
from google.protobuf.struct_pb2 import Struct
from pulumi.runtime import config as runtime_config
from pulumi.runtime import known_types, rpc, settings
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import resource as runtime_resource
from pulumi.runtime.proto import resource_pb2, source_pb2
from pulumi.runtime.stack import Stack
from pulumi.runtime.sync_await import _ensure_event_loop, _sync_await

from . import struct_values
from .gc_tuning import collection_paused
from .stack_config import StackConfig

SECRET_SIG = rpc._special_sig_key
SECRET_VALUE = rpc._special_secret_sig


@dataclass
class RecordedResource:
    type: str
    name: str
    urn: str
    parent: str | None
    custom: bool
    provider: str | None
    inputs: dict[str, Any]
    # For custom resources: the state the mock provider returned; for components: the outputs
    # the component registered (what AnalyzeStack sees as the resource's properties).
    outputs: dict[str, Any] = field(default_factory=dict)
    dependencies: list[str] = field(default_factory=list)
    ignore_changes: list[str] = field(default_factory=list)
    additional_secret_outputs: list[str] = field(default_factory=list)
    # The provider plugin version the registration asks for ("" for none).
    version: str = ""
    # How long the engine waits per operation ({"create": "1500s", ...}; only those set).
    custom_timeouts: dict[str, str] = field(default_factory=dict)


@dataclass
class Evaluation:
    resources: list[RecordedResource]
    stack_outputs: dict[str, Any]
    # The CPU time of the process that evaluated the program, where it was not this one (preview/evaluation_process.py).
    program_cpu_seconds: float = 0.0


def _provider_urn(reference: str) -> str | None:
    # A provider reference is "<urn>::<id>"; the URN itself contains "::" separators.
    return reference.rsplit("::", 1)[0] if reference else None


class PreviewMocks(pulumi_mocks.Mocks):
    """What providers would answer at preview: inputs echoed back, plus the computed outputs
    the program reads from AWS resources."""

    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str, dict]:
        state = dict(args.inputs)
        resource_id = f"{args.name}-id"
        if args.typ.startswith("kubernetes:"):
            metadata = state.get("metadata") or {}
            namespace = metadata.get("namespace")
            name = metadata.get("name", args.name)
            resource_id = f"{namespace}/{name}" if namespace else str(name)
        state.update(_computed_outputs(args.typ, args.name, state))
        return resource_id, state

    def call(self, args: pulumi_mocks.MockCallArgs) -> tuple[dict, list[tuple[str, str]] | None]:
        # No failures is an empty list: the SDK's mock monitor iterates a tuple's second item (None is not iterable).
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": "123456789012", "arn": "arn:aws:iam::123456789012:user/preview", "userId": "preview"}, []
        if args.token == "aws:index/getRegion:getRegion":
            # The provider's region is `aws:region` (the loader requires it where cluster.eks.region is not set).
            region = runtime_config.get_config("aws:region") or "us-east-1"
            return {"name": region, "region": region}, []
        if args.token == "aws:index/getPartition:getPartition":
            return {"partition": "aws", "dnsSuffix": "amazonaws.com"}, []
        return {}, []


def _computed_outputs(type_token: str, name: str, state: dict[str, Any]) -> dict[str, Any]:
    """Outputs AWS computes that the program passes on (placeholders with the real shapes)."""
    if type_token == "aws:eks/cluster:Cluster":
        cluster = state.get("name", name)
        return {
            "arn": f"arn:aws:eks:us-east-1:123456789012:cluster/{cluster}",
            "endpoint": f"https://{cluster}.gr7.us-east-1.eks.amazonaws.com",
            "certificateAuthority": {"data": "UHJldmlldyBDQQ=="},
            "identities": [{"oidcs": [{"issuer": f"https://oidc.eks.us-east-1.amazonaws.com/id/{cluster.upper()}"}]}],
            "vpcConfig": {**(state.get("vpcConfig") or {}), "clusterSecurityGroupId": "sg-0preview"},
        }
    if type_token == "aws:eks/nodeGroup:NodeGroup":
        group = state.get("nodeGroupName", name)
        return {"resources": [{"autoscalingGroups": [{"name": f"eks-{group}-asg"}]}], "status": "ACTIVE"}
    if type_token == "aws:iam/role:Role":
        return {"arn": f"arn:aws:iam::123456789012:role/{state.get('name', name)}"}
    if type_token == "aws:ec2/launchTemplate:LaunchTemplate":
        # A new template's first version (EC2 numbers them from 1), which the node group names.
        return {"latestVersion": 1}
    if type_token == "aws:iam/openIdConnectProvider:OpenIdConnectProvider":
        return {"arn": f"arn:aws:iam::123456789012:oidc-provider/{name}"}
    return {}


class DuplicateUrnError(Exception):
    """Two registrations with one URN: the real engine fails the deployment with this message
    (pulumi/pulumi pkg/resource/deploy/step_generator.go, diag.GetDuplicateResourceURNError in
    pkg/diag/errors.go); the SDK's mock monitor would silently let the second replace the first."""

    def __init__(self, urns: list[str]):
        self.urns = urns
        super().__init__("\n".join(f"Duplicate resource URN '{urn}'; try giving it a unique name" for urn in urns))


# Told of each registration as it happens, like an analyzer the CLI feeds resource by resource: the resource, its
# provider's record, and the two values the SDK serialized for it, its inputs (the registration's `object`) and its
# state (the mock monitor's answer's `object`; empty for a component).
RegistrationListener = Callable[[RecordedResource, "RecordedResource | None", Struct, Struct], None]


class RecordingMonitor(pulumi_mocks.MockMonitor):
    def __init__(self, mocks: PreviewMocks, listener: RegistrationListener | None = None):
        super().__init__(mocks)
        # The SDK's MockMonitor types its mocks as the base class; ours records the inputs.
        self.preview_mocks = mocks
        self.records: dict[str, RecordedResource] = {}
        self.duplicate_urns: list[str] = []
        self._lock = threading.Lock()
        self._listener = listener

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        # The engine qualifies a child's type with its parent's whole type chain, leaving out
        # the root stack's type; the SDK's mock keeps only the parent's last type.
        if parent:
            parent_type = parent.split("::")[2]
            if parent_type != "pulumi:pulumi:Stack":
                type_ = parent_type + "$" + type_
        return "urn:pulumi:" + "::".join([pulumi.get_stack(), pulumi.get_project(), type_, name])

    def RegisterResource(self, request):  # noqa: N802 - gRPC method name
        response, inputs, state = self._registered(request)
        urn = response.urn
        outputs = state if request.custom else {}
        record = RecordedResource(
            type=request.type,
            name=request.name,
            urn=urn,
            parent=request.parent or None,
            custom=bool(request.custom),
            provider=_provider_urn(request.provider),
            inputs=inputs,
            outputs=dict(outputs),
            dependencies=list(request.dependencies),
            ignore_changes=list(request.ignoreChanges),
            additional_secret_outputs=list(request.additionalSecretOutputs),
            version=request.version,
            custom_timeouts={
                op: getattr(request.customTimeouts, op)
                for op in ("create", "update", "delete")
                if getattr(request.customTimeouts, op)
            },
        )
        with self._lock:
            if urn in self.records:
                # Kept apart and raised once the program is done, as the engine reports it.
                self.duplicate_urns.append(urn)
                return response
            self.records[urn] = record
            # A provider registers before the resources that name it.
            provider = self.records.get(record.provider or "")
        if self._listener is not None:
            self._listener(record, provider, request.object, response.object)
        return response

    def _registered(self, request: Any) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        """The SDK's `MockMonitor.RegisterResource` (pulumi 3.272.0 runtime/mocks.py), answer for answer, with the
        request's inputs read and the mocks' state written by preview/struct_values.py; and the inputs as read and
        the state the mocks answered (none for the root stack, which the SDK's monitor answers itself)."""
        if request.type == "pulumi:pulumi:Stack":
            return super().RegisterResource(request), {}, {}
        urn = self.make_urn(request.parent, request.type, request.name)
        # As the SDK's: an event loop on this thread, which reading a resource reference needs.
        _ensure_event_loop()
        inputs = struct_values.read_properties(request.object)
        resource_args = pulumi_mocks.MockResourceArgs(
            typ=request.type,
            name=request.name,
            inputs=inputs,
            provider=request.provider,
            resource_id=request.importId,
            custom=request.custom or False,
            transforms=pulumi_mocks._resolve_callbacks(request.transforms),
        )
        resource_id, state = self.preview_mocks.new_resource(resource_args)
        response = resource_pb2.RegisterResourceResponse(urn=urn, id=resource_id, object=struct_values.state_struct(state))
        self.resources[urn] = pulumi_mocks.MockMonitor.ResourceRegistration(urn, resource_id, state)
        return response, inputs, state

    def RegisterResourceOutputs(self, request):  # noqa: N802 - gRPC method name
        outputs = rpc.deserialize_properties(request.outputs, keep_unknowns=True)
        with self._lock:
            if request.urn in self.records:
                self.records[request.urn].outputs = outputs
        return super().RegisterResourceOutputs(request)


# Told of each stack output as the program exports it (its name and the value as given, an Output or plain data).
ExportListener = Callable[[str, Any], None]


class _HeardOutputs(dict):
    """The root stack's outputs, telling a listener of each as `pulumi.export` stores it (pulumi/runtime/stack.py
    Stack.output: `self.outputs[name] = value`), which is while the program runs, before its registrations drain."""

    def __init__(self, exported: ExportListener):
        super().__init__()
        self._exported = exported

    def __setitem__(self, name: str, value: Any) -> None:
        super().__setitem__(name, value)
        self._exported(name, value)


@contextlib.contextmanager
def _sdk_attribute(owner: Any, name: str, value: Any) -> Iterator[None]:
    """`owner.name` is `value` within (an SDK function the preview replaces while the program runs), as it was after."""
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


def without_source_positions() -> contextlib.AbstractContextManager[None]:
    """Registrations sent without the program's stack trace, which only the real engine reads (for diagnostics).

    The SDK walks the whole Python stack for every registration and turns each frame's file into a URI
    (pulumi/pulumi v3.272.0 sdk/python/lib/pulumi/runtime/resource.py: `register_resource` calls `_get_stack_trace`,
    which calls `traceback.extract_stack` and `pathlib.Path(...).as_uri()` per frame); the mock monitor drops the
    request's `sourcePosition` and `stackTrace` unread (pulumi/runtime/mocks.py `MockMonitor.RegisterResource`) and so
    does ours. Components nest a model's resources about ten frames deep: 11% of the evaluation at 100 models under
    cProfile, which inflates such small calls; about 0.1 ms a registration unprofiled."""
    return _sdk_attribute(runtime_resource, "_get_stack_trace", source_pb2.StackTrace)


def acyclic_unknown_checks() -> contextlib.AbstractContextManager[None]:
    """The SDK's check of a value for unknowns, without the reference cycle each call of it leaves behind.

    pulumi 3.272.0's `rpc.contains_unknowns` (sdk/python/lib/pulumi/runtime/rpc.py) defines a recursive closure on every
    call: the function refers to itself through its cell, so the function, its cell and its annotations (`set[int]`)
    outlive the call until the cyclic collector runs. The SDK calls it for every Output it makes and every value it
    serializes: 30 times a resource, 133,000 calls and 800,000 objects only the collector frees at 100 models, the only
    cyclic garbage the program's evaluation makes (counted with `gc.DEBUG_SAVEALL`). `unknowns_in` is the same walk,
    module-level; with it the evaluation runs with the collector paused (`collection_paused`). Every caller reaches the
    check through the module (`output.py` calls `rpc.contains_unknowns`, `rpc.py` its own global), so one assignment
    serves them all."""
    return _sdk_attribute(rpc, "contains_unknowns", contains_unknowns)


@contextlib.contextmanager
def faster_struct_reads() -> Iterator[None]:
    """The SDK's reading of a Struct into Python values (`rpc.deserialize_properties`, `rpc.deserialize_property`) done
    by preview/struct_values.py, answer for answer: the SDK reads every resource's answer that way (`resolve_outputs`),
    through protobuf's Python wrappers. Both are module globals that `rpc.py` calls by name and other modules through
    the module, so one assignment each serves every caller."""
    with (
        _sdk_attribute(rpc, "deserialize_properties", struct_values.read_properties),
        _sdk_attribute(rpc, "deserialize_property", struct_values.read_property),
    ):
        yield


def contains_unknowns(val: Any) -> bool:
    """pulumi 3.272.0 `rpc.contains_unknowns`: whether `val` is unknown or holds an unknown in its dicts and lists."""
    return unknowns_in(val, set())


# The plain scalar types: neither unknown nor holding one (passed over without a call by `unknowns_in`), and what
# `is_plain_data` holds a stack output's leaves to.
PLAIN_SCALARS = frozenset({str, int, float, bool, type(None)})


def unknowns_in(val: Any, seen_ids: set[int]) -> bool:
    """The SDK's inner `impl`, answer for answer: an Unknown is unknown; a dict's values and a list's items are walked,
    a dict or list already seen (one holding itself) not again. Unlike the SDK's, it remembers only the dicts and
    lists it walked and calls itself for no plain scalar (a third of the time on the inputs of 100 models'
    resources): a scalar is unknown or not whether seen before or not, so the answers are the same
    (tests/test_preview_engine.py compares them)."""
    if isinstance(val, dict):
        # Read as the SDK reads them: an input type is a dict whose `values` may be a field (a selector's values).
        children: Any = (val[k] for k in val)
    elif isinstance(val, list):
        children = val
    else:
        return known_types.is_unknown(val)
    if id(val) in seen_ids:
        return False
    seen_ids.add(id(val))
    for child in children:
        if type(child) not in PLAIN_SCALARS and unknowns_in(child, seen_ids):
            return True
    return False


def evaluate(
    program_dir: Path,
    config: StackConfig,
    listener: RegistrationListener | None = None,
    exported: ExportListener | None = None,
) -> Evaluation:
    """Run `<program_dir>/__main__.py` for one stack under mocks; return what it registered
    (`listener`, if given, hears of each registration as it happens; `exported` of each stack output as it is
    exported).

    Raises the program's own exception (a ConfigError for bad stack config) unchanged, and
    DuplicateUrnError when two registrations share a URN.
    """
    runtime_config.set_all_config(dict(config.values), list(config.secret_keys))
    settings.ROOT.set(None)
    mocks = PreviewMocks()
    monitor = RecordingMonitor(mocks, listener)
    pulumi.runtime.set_mocks(mocks, project=config.project, stack=config.stack, preview=True, monitor=monitor)
    root = settings.get_root_resource()
    if exported is not None and isinstance(root, Stack):
        root.outputs = _HeardOutputs(exported)

    sys.path.insert(0, str(program_dir))
    try:
        with without_source_positions(), acyclic_unknown_checks(), faster_struct_reads(), collection_paused():
            runpy.run_path(str(program_dir / "__main__.py"), run_name="__main__")
            _sync_await(pulumi.runtime.stack.wait_for_rpcs())
            stack_outputs = _resolve_outputs(getattr(root, "outputs", {}))
    finally:
        sys.path.remove(str(program_dir))
    if monitor.duplicate_urns:
        raise DuplicateUrnError(sorted(monitor.duplicate_urns))
    # The SDK registers resources from a thread pool, so arrival order varies between runs;
    # order by depth, then URN, for output that diffs cleanly.
    resources = sorted(monitor.records.values(), key=lambda r: (r.urn.count("$"), r.urn))
    return Evaluation(resources=resources, stack_outputs=stack_outputs)


def _resolve_outputs(outputs: dict[str, Any]) -> dict[str, Any]:
    async def resolve() -> dict[str, Any]:
        resolved = {}
        for key, value in outputs.items():
            if is_plain_data(value):
                resolved[key] = value
                continue
            output = pulumi.Output.from_input(value)
            # Like the CLI: a secret output is shown as [secret], never its value.
            resolved[key] = "[secret]" if await output.is_secret() else await output.future(with_unknowns=True)
        return resolved

    return _sync_await(resolve())


def is_plain_data(value: Any) -> bool:
    """Whether a stack output is plain data throughout (dicts, lists, tuples, strings, numbers, booleans, None): what
    `Output.from_input` would resolve it to is an equal value, known and not secret (pulumi 3.272.0 output.py
    `from_input` rebuilds each container, and `_OutputData.__post_init__` walks each rebuilt level's whole value for
    unknowns: at 100 models the stack's tables took 5% of the preview's CPU that way)."""
    kind = type(value)
    if kind is dict:
        return all(type(k) is str and is_plain_data(v) for k, v in value.items())
    if kind is list or kind is tuple:
        return all(is_plain_data(v) for v in value)
    return kind in PLAIN_SCALARS
