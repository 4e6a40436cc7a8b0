"""The mock engine's reading and writing of properties (preview/struct_values.py) answers as the SDK's own: every
registration of the committed stacks replayed through the SDK's mock monitor, every answer read back by the SDK's
functions, and the values the stacks do not hold (nulls, secrets in lists and maps, unknowns outside a preview,
internal fields, assets, archives, resource references, output values, state the mocks change)."""

from __future__ import annotations

import json
import math
from typing import Any

import pulumi
import pytest
from google.protobuf.struct_pb2 import ListValue, Struct, Value
from pulumi.output import Output, Unknown
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc, settings

from preview import engine, struct_values

from .helpers import _evaluation, raw_stack

SIG = rpc._special_sig_key


def _shape(value: Any) -> Any:
    """A value read from a Struct, with what equality would not tell apart: each type, each dict's key order, what an
    unknown, an asset, an archive, a resource or an output is."""
    if isinstance(value, dict):
        return ("dict", [(key, _shape(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("list", [_shape(item) for item in value])
    if isinstance(value, Unknown):
        return ("unknown",)
    if isinstance(value, Output):
        data = value._data.result()
        urns = sorted(r.urn._data.result().value for r in data.resources)
        return ("output", _shape(data.value), data.is_known, data.is_secret, urns)
    if isinstance(value, pulumi.Resource):
        return ("resource", type(value).__name__, value.urn._data.result().value)
    if isinstance(value, (pulumi.Asset, pulumi.Archive)):
        return (type(value).__name__, _shape({k: v for k, v in vars(value).items() if not k.startswith("_")}))
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    return (type(value).__name__, value)


def _struct_shape(struct: Struct) -> Any:
    """A Struct's fields in their order, nested: two Structs that serialize alike may still be read in two orders."""
    return [(key, _value_shape(value)) for key, value in struct.fields.items()]


def _value_shape(value: Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return _struct_shape(value.struct_value)
    if kind == "list_value":
        return [_value_shape(item) for item in value.list_value.values]
    return (kind, getattr(value, kind) if kind != "number_value" or not math.isnan(value.number_value) else "nan")


def _same_struct(ours: Struct, sdks: Struct) -> None:
    assert ours.SerializeToString(deterministic=True) == sdks.SerializeToString(deterministic=True)
    assert _struct_shape(ours) == _struct_shape(sdks)


def _reads(struct: Struct) -> None:
    """`read_properties` and `read_property` against the SDK's, with each choice of unknowns and internal fields."""
    for keep_unknowns in (None, False, True):
        for keep_internal in (True, False, None):
            sdks = struct_values._sdk_deserialize_properties(struct, keep_unknowns, keep_internal)
            assert _shape(struct_values.read_properties(struct, keep_unknowns, keep_internal)) == _shape(sdks)
        ours = struct_values.read_property(struct, keep_unknowns)
        assert _shape(ours) == _shape(rpc.deserialize_property(struct, keep_unknowns))


STACKS = {
    "dev": None,
    "staging": None,
    # A secret in the state (the Hugging Face token's Secret).
    "prod": {"inference-platform:huggingFaceTokens": json.dumps({"serving": "hf_test_token"})},
}


@pytest.fixture(scope="module")
def registrations() -> list[tuple[Any, Any, dict[str, Any]]]:
    """Every registration of the committed stacks: the request as the SDK sent it, the engine's answer and the inputs
    it recorded."""
    sent: list[tuple[Any, Any, dict[str, Any]]] = []
    register = engine.RecordingMonitor._registered

    def recording(self: Any, request: Any) -> Any:
        response, inputs, state = register(self, request)
        sent.append((request, response, inputs))
        return response, inputs, state

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine.RecordingMonitor, "_registered", recording)
        for stack, secrets in STACKS.items():
            _evaluation(raw_stack(stack), None, secrets)
    return sent


def _sdk_monitor() -> pulumi_mocks.MockMonitor:
    """The SDK's own mock monitor with the preview's mocks and URNs."""
    monitor = pulumi_mocks.MockMonitor(engine.PreviewMocks())
    monitor.make_urn = engine.RecordingMonitor.make_urn.__get__(monitor)  # type: ignore[method-assign]
    return monitor


def test_every_registration_of_the_committed_stacks_is_answered_as_the_sdks_mock_monitor_answers(registrations):
    assert len(registrations) > 800
    sdk = _sdk_monitor()
    for request, response, inputs in registrations:
        expected = sdk.RegisterResource(request)
        assert (response.urn, response.id) == (expected.urn, expected.id)
        _same_struct(response.object, expected.object)
        if request.type != "pulumi:pulumi:Stack":
            assert _shape(inputs) == _shape(struct_values._sdk_deserialize_properties(request.object))
        assert _shape(struct_values.read_properties(response.object)) == _shape(
            struct_values._sdk_deserialize_properties(expected.object)
        )


def test_every_struct_of_the_committed_stacks_is_read_as_the_sdk_reads_it(registrations):
    for request, response, _ in registrations:
        _reads(request.object)
        _reads(response.object)


def test_the_evaluation_reads_through_the_engines_functions_and_leaves_the_sdks_in_place(registrations):
    assert rpc.deserialize_properties is struct_values._sdk_deserialize_properties
    assert rpc.deserialize_property.__module__ == "pulumi.runtime.rpc"
    with engine.faster_struct_reads():
        assert rpc.deserialize_properties is struct_values.read_properties
        assert rpc.deserialize_property is struct_values.read_property
    assert rpc.deserialize_properties is struct_values._sdk_deserialize_properties


def _struct(value: dict[str, Any]) -> Struct:
    struct = Struct()
    struct.update(value)
    return struct


def _secret(value: Any) -> dict[str, Any]:
    return {SIG: rpc._special_secret_sig, "value": value}


# Values the committed stacks do not hold, as the SDK would send them.
EDGE_CASES: dict[str, dict[str, Any]] = {
    "empty": {},
    "nulls": {"top": None, "nested": {"gone": None, "kept": 1, "list": [None, 2, None]}, "list": [None]},
    "unknowns": {"top": rpc.UNKNOWN, "nested": {"a": rpc.UNKNOWN, "b": [rpc.UNKNOWN, "x"]}},
    "secret at the top": {"token": _secret("hf"), "other": "plain"},
    "secret in a map": {"env": {"a": _secret("s"), "b": "t", "c": {"d": _secret([1, 2])}}},
    "secret in a list": {"args": ["a", _secret("b"), {"c": _secret(None)}]},
    "secret deep": {"a": {"b": [{"c": {"d": _secret({"e": _secret("f")})}}]}},
    "secret of unknown": {"a": _secret(rpc.UNKNOWN), "b": [_secret(rpc.UNKNOWN)]},
    "internal": {"__provider": "p", "__internal": 1, "__": {"x": 1}, "kept": {"__nested": 2}},
    "numbers": {"int": 3, "float": 1.5, "big": 1e300, "negative": -0.0, "nan": float("nan"), "inf": float("inf")},
    "scalars": {"t": True, "f": False, "s": "", "unicode": "é ☃", "list": [], "map": {}},
    "asset": {"file": {SIG: rpc._special_asset_sig, "path": "a.txt"}, "text": {SIG: rpc._special_asset_sig, "text": "x"}},
    "archive": {
        "uri": {SIG: rpc._special_archive_sig, "uri": "https://example.com/a.zip"},
        "assets": {SIG: rpc._special_archive_sig, "assets": {"a": {SIG: rpc._special_asset_sig, "text": "y"}}},
    },
    "resource reference": {"ref": {SIG: rpc._special_resource_sig, "urn": "urn:pulumi:s::p::test:index:T::t", "id": "t-id"}},
    "output value": {
        "known": {SIG: rpc._special_output_value_sig, "value": "v", "secret": True},
        "unknown": {SIG: rpc._special_output_value_sig, "dependencies": ["urn:pulumi:s::p::test:index:T::t"]},
    },
}


@pytest.mark.parametrize("dry_run", [True, False], ids=["preview", "update"])
@pytest.mark.parametrize("case", EDGE_CASES, ids=list(EDGE_CASES))
def test_values_the_stacks_do_not_hold_are_read_as_the_sdk_reads_them(case: str, dry_run: bool, monkeypatch):
    monkeypatch.setattr(settings.SETTINGS, "dry_run", dry_run)
    _reads(_struct(EDGE_CASES[case]))


def test_a_list_value_and_scalars_are_read_as_the_sdk_reads_them():
    items = ListValue()
    items.extend(["a", 1, None, {"b": _secret(2)}, [_secret("c")], rpc.UNKNOWN])
    for value in (items, "text", rpc.UNKNOWN, 1.0, True, None):
        for keep_unknowns in (None, True):
            ours = struct_values.read_property(value, keep_unknowns)
            assert _shape(ours) == _shape(rpc.deserialize_property(value, keep_unknowns))


def test_a_value_with_nothing_set_fails_as_in_the_sdk():
    struct = Struct()
    struct.fields["empty"].SetInParent()
    with pytest.raises(ValueError, match="Value not set") as sdks:
        struct_values._sdk_deserialize_properties(struct)
    with pytest.raises(ValueError, match="Value not set") as ours:
        struct_values.read_properties(struct)
    assert str(ours.value) == str(sdks.value)


class _Tier(str):
    """A str subclass (as an enum's value may be), which the SDK serializes itself."""


# The mocks' answers and what the request held, as the SDK's monitor writes them.
STATES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "the inputs": ({"a": 1, "b": {"c": [1, "x"]}}, {}),
    "the inputs and computed outputs": ({"name": "n", "tags": {"k": "v"}}, {"arn": "arn:x", "latest": 1, "deep": {"x": [True]}}),
    "an input replaced": ({"vpcConfig": {"subnets": ["a"]}}, {"vpcConfig": {"subnets": ["a"], "sg": "sg-1"}}),
    "a null among the inputs": ({"a": None, "b": {"c": None, "d": 1}}, {"e": None}),
    "a secret among the inputs": ({"a": _secret("s"), "b": {"c": _secret(1)}}, {}),
    "unknowns": ({"a": rpc.UNKNOWN, "b": [rpc.UNKNOWN]}, {"c": Unknown(), "d": [Unknown()]}),
    "a tuple and an int": ({}, {"t": (1, "a", None), "i": 7}),
    "a value the SDK serializes": ({"a": "x"}, {"tier": _Tier("premium"), "asset": pulumi.StringAsset("text")}),
}


@pytest.mark.parametrize("case", STATES, ids=list(STATES))
def test_the_state_is_written_as_the_sdks_mock_monitor_writes_it(case: str):
    inputs_sent, computed = STATES[case]
    state = {**struct_values.read_properties(_struct(inputs_sent)), **computed}
    expected = pulumi_mocks._sync_await(rpc.serialize_properties(state, {}))
    _same_struct(struct_values.state_struct(state), expected)
