"""The pack decodes each resource once per analyzer request (policies/inference_governance/decoding.py), with the
verdicts the policy SDK's own decoding (once per policy) gives: both, side by side, over every committed stack and
over a stack changed to break many rules at once."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from preview.engine import RecordedResource
from preview.performance import preview_policy_config
from preview.policy_runner import PolicyPack
from preview.stack_config import load_project, load_stack_config

from .helpers import IMAGES_BY_TAG, ROOT, Evaluated, prod_with_labeller_server, raw_stack
from .policy_helpers import _careless


def _running(stack: str, decode_each: bool) -> PolicyPack:
    config = load_stack_config(load_project(ROOT), stack)
    saved = os.environ.get("POLICY_PACK_DECODE_EACH")
    os.environ["POLICY_PACK_DECODE_EACH"] = "1" if decode_each else "0"
    try:
        running = PolicyPack(ROOT / "policies", config.values, "inference-platform", stack).connect()
    finally:
        if saved is None:
            os.environ.pop("POLICY_PACK_DECODE_EACH")
        else:
            os.environ["POLICY_PACK_DECODE_EACH"] = saved
    running.handshake(ROOT)
    running.configure_stack("inference-platform", stack, config.values, config.secret_keys)
    running.configure(running.info(), preview_policy_config(IMAGES_BY_TAG))
    return running


def _verdicts(pack: PolicyPack, records: list[RecordedResource]) -> Iterator[tuple[str, str, str, str]]:
    providers = {r.urn: r for r in records if r.type.startswith("pulumi:providers:")}
    for record in records:
        if record.custom and not record.type.startswith("pulumi:providers:"):
            provider = providers.get((record.provider or "").rsplit("::", 1)[0])
            for d in pack.analyze(record, provider):
                yield ("resource", d.policy, d.urn, d.message)
    for d in pack.analyze_stack(r for r in records if not r.type.startswith("pulumi:providers:")):
        yield ("stack", d.policy, d.urn, d.message)


@pytest.mark.parametrize("stack", ["dev", "staging", "prod", "prod-careless"])
def test_decoding_once_per_request_gives_the_sdks_verdicts(stack: str) -> None:
    name = stack.removesuffix("-careless")
    raw: Any = prod_with_labeller_server() if stack == "prod-careless" else raw_stack(name)
    records = Evaluated(raw, shared=True).records
    if stack == "prod-careless":
        records = _careless(records)
    once, each = _running(name, decode_each=False), _running(name, decode_each=True)
    try:
        found = sorted(_verdicts(once, records))
        assert found == sorted(_verdicts(each, records))
    finally:
        once.close()
        each.close()
    if stack == "prod-careless":
        assert len({policy for _, policy, _, _ in found}) >= 5, found


def _reads(view: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str]]:
    """Every read a rule could make of a view, and what it gives: a value, a view's kind and length, or the error."""
    from collections.abc import Mapping, Sequence

    keys = list(view) if isinstance(view, Mapping) else [*range(len(view)), *range(-len(view), 0)]
    yield path, _kind(view)
    yield path, f"len {len(view)}, equal to itself {_outcome(lambda: view == view)}"
    for key in keys:
        try:
            value = view[key]
        except Exception as error:  # noqa: BLE001 - the error is what is compared
            yield (*path, key), f"{type(error).__name__}: {getattr(error, 'message', error)}"
            continue
        yield (*path, key), f"the same when read again {view[key] is value}"
        if isinstance(value, (Mapping, Sequence)) and not isinstance(value, str):
            yield from _reads(value, (*path, key))
        else:
            yield (*path, key), repr(value)
    if not isinstance(view, Mapping) and len(view) > 1:
        yield (*path, "[1:]"), repr([_kind(item) for item in view[1:]])


def _outcome(read: Any) -> str:
    try:
        return repr(read())
    except Exception as error:  # noqa: BLE001 - the error is what is compared
        return f"{type(error).__name__}: {getattr(error, 'message', error)}"


def _kind(value: Any) -> str:
    name = type(value).__name__
    return {"_LazyDict": "_DictProxy", "_LazyList": "_ListProxy"}.get(name, name)


def test_the_stacks_views_made_as_read_give_what_the_sdks_whole_views_give() -> None:
    """The stack's properties are read through views made as the rules read them (decoding.py `_LazyDict`): every
    value, nested view, length, slice and unknown value's error, path included, as pulumi-policy's own view gives."""
    import sys

    from pulumi_policy.proxy import UNKNOWN_NUMBER_VALUE, UNKNOWN_STRING_VALUE, unknown_checking_proxy

    sys.path.insert(0, str(ROOT / "policies"))
    from inference_governance.decoding import _lazy_view

    value = {
        "metadata": {"name": "llama", "labels": {"app": "llama", "pending": UNKNOWN_STRING_VALUE}},
        "spec": {
            "replicas": UNKNOWN_NUMBER_VALUE,
            "containers": [{"name": "vllm", "args": ["--port", "8000"]}, {"name": "proxy", "ports": []}, "x"],
            "ports": [{"port": 80}, {"port": UNKNOWN_NUMBER_VALUE}, UNKNOWN_STRING_VALUE],
        },
        "empty": {},
    }
    lazy, eager = list(_reads(_lazy_view(value, []))), list(_reads(unknown_checking_proxy(value)))
    assert lazy == eager
    assert any("UnknownValueError: string value at .metadata.labels.pending" in read for _, read in eager)
    assert any("number value at .spec.replicas" in read for _, read in eager)
    assert any("number value at .spec.ports.1.port" in read for path, read in eager if -2 in path)
    assert any("the same when read again True" in read for path, read in eager if path == ("spec", "containers"))


@pytest.mark.parametrize("as_bytes", [True, False], ids=["read as the pack's server reads it", "the SDK's message"])
def test_a_stack_resource_is_decoded_when_a_policy_first_reads_it(as_bytes: bool) -> None:
    """AnalyzeStack's resources keep their properties as the request's message (the pack's server reads them as
    bytes: stack_request.py) until a stack policy reads them (decoding.py `_StackResource`): the policies that read
    every workload's pods (`kube.pod_makers`) leave the rest undecoded; what they read is the SDK's decoding, the same
    view on every read."""
    import sys

    from google.protobuf import json_format, struct_pb2
    from pulumi.runtime.proto import analyzer_pb2
    from pulumi_policy.deserialize import deserialize_properties

    sys.path.insert(0, str(ROOT / "policies"))
    from inference_governance import decoding, kube
    from inference_governance.stack_request import StackRequest

    def struct(value: dict[str, Any]) -> struct_pb2.Struct:
        message = struct_pb2.Struct()
        message.update(value)
        return message

    objects: dict[str, dict[str, Any]] = {
        "kubernetes:core/v1:ConfigMap": {"metadata": {"name": "dashboards", "namespace": "t1"}, "data": {"a": "b"}},
        "kubernetes:apps/v1:Deployment": {
            "metadata": {"name": "llama", "namespace": "t1"},
            "spec": {"template": {"metadata": {"labels": {"app": "llama"}}, "spec": {"containers": [{"name": "vllm"}]}}},
        },
    }
    request = analyzer_pb2.AnalyzeStackRequest(
        resources=[
            analyzer_pb2.AnalyzerResource(type=kind, urn=f"urn:{i}", name=str(i), properties=struct(value))
            for i, (kind, value) in enumerate(objects.items())
        ]
    )

    class Servicer:
        def _get_resource_options(self, resource: Any) -> None:
            return None

        def _get_provider_resource(self, resource: Any) -> None:
            return None

    received = StackRequest.FromString(request.SerializeToString()) if as_bytes else request
    assert type(received.resources[1].properties) is (bytes if as_bytes else struct_pb2.Struct)
    config_map, deployment = decoding._stack_resources(Servicer(), received)
    args = type("Args", (), {"resources": [config_map, deployment]})()
    assert list(kube.pod_makers(args)) == [deployment]
    assert config_map._props is None and deployment._props is None
    first = deployment.props
    sdk = deserialize_properties(json_format.MessageToDict(request.resources[1].properties))
    assert (
        deployment.props is first and kube.pod_template(deployment.resource_type, first)["metadata"]["labels"]["app"] == "llama"
    )
    assert dict(first["metadata"]) == sdk["metadata"] and config_map._props is None


# The scalars the random tables below hold.
SCALARS = [None, True, False, 0, -1.5, 2**53, "", "a\nb", "é"]


def _golden_messages() -> Iterator[Any]:
    """Every committed stack's resources' inputs (tests/golden), each as a Struct."""
    import json

    from google.protobuf import struct_pb2

    stacks = sorted((ROOT / "tests" / "golden").glob("*.resources.json"))
    assert len(stacks) == 3
    for path in stacks:
        for entry in json.loads(path.read_text()):
            message = struct_pb2.Struct()
            message.update(entry["inputs"] or {})
            yield message


def _random_table(generator: Any, depth: int, leaf: Any) -> Any:
    """Lists and tables `depth` deep at most, of `leaf()`s."""
    if depth == 0 or generator.random() < 0.3:
        return leaf()
    if generator.random() < 0.5:
        return [_random_table(generator, depth - 1, leaf) for _ in range(generator.randrange(4))]
    return {f"k{i}": _random_table(generator, depth - 1, leaf) for i in range(generator.randrange(4))}


def test_struct_dict_makes_what_the_sdks_json_printer_makes() -> None:
    """A resource's properties turn into a dict as protobuf's `json_format.MessageToDict` turns them (decoding.py
    `struct_dict`): every committed stack's resources, and values of each kind (an unset value, nulls, nested empty
    tables and lists, negative zero, booleans that must not become numbers); infinities and NaN refused alike."""
    import json
    import math
    import random
    import sys

    from google.protobuf import json_format, struct_pb2

    sys.path.insert(0, str(ROOT / "policies"))
    from inference_governance import decoding

    def same(message: struct_pb2.Struct) -> None:
        ours, sdks = decoding.struct_dict(message), json_format.MessageToDict(message)
        # json.dumps tells True from 1 and 1.0 from 1, and keeps the order of keys.
        assert json.dumps(ours) == json.dumps(sdks)
        assert decoding._message_to_dict(message) == sdks

    for message in _golden_messages():
        same(message)
    odd = struct_pb2.Struct()
    odd.update({"none": None, "zero": -0.0, "big": 1e300, "flag": True, "list": [[], {}, [None, False, 0]], "ü": "é"})
    odd.fields["unset"].CopyFrom(struct_pb2.Value())
    same(odd)
    generator = random.Random(30)
    for _ in range(300):
        message = struct_pb2.Struct()
        message.update({"root": _random_table(generator, 5, lambda: generator.choice(SCALARS))})
        same(message)
    for bad in (math.inf, -math.inf, math.nan):
        message = struct_pb2.Struct()
        message.update({"nested": {"x": [bad]}})
        with pytest.raises(ValueError) as ours:
            decoding.struct_dict(message)
        with pytest.raises(ValueError) as sdks:
            json_format.MessageToDict(message)
        assert str(ours.value) == str(sdks.value)
    # Another message, or other options, is the SDK's printer's.
    value = struct_pb2.Value(string_value="x")
    assert decoding._message_to_dict(value) == "x"
    assert decoding._message_to_dict(odd, preserving_proto_field_name=True) == json_format.MessageToDict(odd)


def test_deserialized_makes_in_one_walk_what_the_sdks_two_steps_make() -> None:
    """A resource's properties decoded in one walk (decoding.py `deserialized`) are what pulumi-policy's
    `deserialize_properties(MessageToDict(...))` makes of them, in types and key order: every committed stack's
    resources, random tables and lists; and where the SDK turns a marked table into a secret's value, an asset or an
    archive, or refuses a value (a secret without one, an unknown signature, infinities and NaN), the same values and
    the same errors, at any depth and beside plain values."""
    import json
    import math
    import random
    import sys

    from google.protobuf import json_format, struct_pb2

    sys.path.insert(0, str(ROOT / "policies"))
    import pulumi
    from inference_governance import decoding
    from pulumi_policy.deserialize import SPECIAL_ARCHIVE_SIG, SPECIAL_ASSET_SIG, SPECIAL_SECRET_SIG, SPECIAL_SIG_KEY
    from pulumi_policy.deserialize import deserialize_properties as sdk_deserialize

    def shown(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: shown(item) for key, item in value.items()}
        if isinstance(value, list):
            return [shown(item) for item in value]
        if isinstance(value, (pulumi.Asset, pulumi.Archive)):
            return [type(value).__name__, sorted((k, shown(v)) for k, v in vars(value).items())]
        return value

    def outcome(decode: Any, message: struct_pb2.Struct) -> str:
        try:
            return json.dumps(shown(decode(message)))
        except Exception as error:  # noqa: BLE001 - the error is what is compared
            return f"{type(error).__name__}: {error}"

    def same(message: struct_pb2.Struct) -> str:
        ours = outcome(decoding.deserialized, message)
        assert ours == outcome(lambda m: sdk_deserialize(json_format.MessageToDict(m)), message)
        return ours

    for message in _golden_messages():
        same(message)
    secret = {SPECIAL_SIG_KEY: SPECIAL_SECRET_SIG, "value": {"token": "s3cr3t", "n": [1, {"deep": True}]}}
    asset = {SPECIAL_SIG_KEY: SPECIAL_ASSET_SIG, "text": "hello"}
    archive = {SPECIAL_SIG_KEY: SPECIAL_ARCHIVE_SIG, "assets": {"a.txt": asset}}
    marked = [secret, asset, archive, {SPECIAL_SIG_KEY: SPECIAL_SECRET_SIG}, {SPECIAL_SIG_KEY: "unknown-signature"}]
    generator = random.Random(30)

    def leaf(odd: bool) -> Any:
        return generator.choice(marked if odd and generator.random() < 0.2 else SCALARS)

    outcomes = []
    for index in range(600):
        message = struct_pb2.Struct()
        odd = index % 2 == 1
        message.update({"root": _random_table(generator, 5, lambda: leaf(odd)), "plain": {"x": [1, "y"]}})
        outcomes.append(same(message))
    for bad in (math.inf, -math.inf, math.nan):
        for beside in ({}, {"secret": secret}):
            message = struct_pb2.Struct()
            message.update({"nested": {"x": [bad]}, **beside})
            assert same(message).startswith("ValueError")
    # Secrets' values, assets, archives and the errors were all met, not only plain tables.
    assert any("s3cr3t" in o for o in outcomes) and any("AssetArchive" in o for o in outcomes)
    assert any(o.startswith("AssertionError") for o in outcomes) and sum(o.startswith("{") for o in outcomes) > 300


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_pack_reads_a_stack_request_with_every_field_and_the_properties_wire_bytes(stack: str) -> None:
    """`StackRequest` (stack_request.py) reads the AnalyzeStackRequest the preview sends for a committed stack: each
    resource's properties are the wire bytes of its `Struct` (parsed, the SDK's message's properties; an empty one
    none), every other field as the SDK's message has it."""
    import sys

    from google.protobuf import struct_pb2
    from pulumi.runtime.proto import analyzer_pb2

    from preview.policy_runner import stack_request

    sys.path.insert(0, str(ROOT / "policies"))
    from inference_governance.stack_request import StackRequest

    records = [r for r in Evaluated(raw_stack(stack), shared=True).records if not r.type.startswith("pulumi:providers:")]
    data = stack_request(records).SerializeToString()
    sdk, read = analyzer_pb2.AnalyzeStackRequest.FromString(data), StackRequest.FromString(data)
    assert len(read.resources) == len(sdk.resources) == len(records)
    for ours, theirs in zip(read.resources, sdk.resources):
        assert struct_pb2.Struct.FromString(ours.properties) == theirs.properties
        assert (ours.type, ours.urn, ours.name, ours.parent, list(ours.dependencies)) == (
            theirs.type,
            theirs.urn,
            theirs.name,
            theirs.parent,
            list(theirs.dependencies),
        )
        assert ours.options.SerializeToString() == theirs.options.SerializeToString()
        assert ours.HasField("provider") == theirs.HasField("provider")
        assert ours.provider.SerializeToString() == theirs.provider.SerializeToString()
        assert {k: list(v.urns) for k, v in ours.propertyDependencies.items()} == {
            k: list(v.urns) for k, v in theirs.propertyDependencies.items()
        }


def test_the_pack_server_reads_analyze_stack_alone_so() -> None:
    """The analyzer service's handlers as pulumi's generated code registers them, through the pack's registration
    (stack_request.py): AnalyzeStack's request read as a `StackRequest`, every other method's as generated."""
    import sys

    import grpc
    from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

    sys.path.insert(0, str(ROOT / "policies"))
    from inference_governance import stack_request

    class Server:
        handlers: tuple[grpc.GenericRpcHandler, ...] = ()

        def add_generic_rpc_handlers(self, handlers: tuple[grpc.GenericRpcHandler, ...]) -> None:
            self.handlers += tuple(handlers)

    class Call(grpc.HandlerCallDetails):
        def __init__(self, method: str) -> None:
            self.method, self.invocation_metadata = method, ()

    server = Server()
    stack_request._add_analyzer_servicer(analyzer_pb2_grpc.AnalyzerServicer(), server)
    (handler,) = server.handlers
    assert handler.service(Call(stack_request.ANALYZE_STACK)).request_deserializer == stack_request.StackRequest.FromString
    assert handler.service(Call("/pulumirpc.Analyzer/Analyze")).request_deserializer == analyzer_pb2.AnalyzeRequest.FromString
    assert handler.service(Call("/pulumirpc.Other/Method")) is None
