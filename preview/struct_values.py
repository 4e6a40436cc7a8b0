"""A registration's properties between protobuf's Struct and Python values, answer for answer as the SDK converts them.

Under the mock engine every property of every resource crosses the wire three times (pulumi 3.272.0): the SDK
serializes the inputs into the request's Struct; the mock monitor reads them back (runtime/mocks.py
`MockMonitor.RegisterResource`: `rpc.deserialize_properties`) and writes the state the mocks answer into the
response's Struct (`_sync_await(rpc.serialize_properties(state, {}))`: a turn of an event loop per resource and a
coroutine per value); the SDK reads the response back (runtime/rpc.py `resolve_outputs`: `deserialize_properties`).
The SDK reads through protobuf's Python wrappers (`Struct.items` builds a list of every field's value, and every
value, messages included, is compared with the unknown's text); `read_properties` and `read_property` read each
field's `Value` directly, and `state_struct` writes plain state without coroutines. A signature other than a secret's
(an asset, an archive, a resource reference, an output value) is the SDK's to read, and a state holding anything but
plain values and unknowns the SDK's to write. The engine puts them in the SDK's place while the program runs
(preview/engine.py); tests/test_struct_values.py compares every answer with the SDK's, the order of every map
included.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.internal.well_known_types import _GetStructValue  # type: ignore[attr-defined]
from google.protobuf.struct_pb2 import ListValue, Struct, Value
from pulumi.output import Unknown
from pulumi.runtime import known_types, rpc, settings
from pulumi.runtime.sync_await import _sync_await

_SIG = rpc._special_sig_key
_UNKNOWN = rpc.UNKNOWN
# The SDK's own functions, kept before the engine puts these in their place (preview/engine.py `faster_struct_reads`).
_sdk_deserialize_properties = rpc.deserialize_properties
_sdk_serialize_properties = rpc.serialize_properties


class _Secrets:
    """How many values a read may have made secrets (a signature the SDK read, a container made secret): a container
    looks among its items for a secret only where one may be."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


def read_properties(struct: Struct, keep_unknowns: bool | None = None, keep_internal: bool | None = True) -> Any:
    """`rpc.deserialize_properties(struct, keep_unknowns, keep_internal)`."""
    return _read_struct(struct, keep_unknowns, keep_internal, _Secrets())


def read_property(value: Any, keep_unknowns: bool | None = None, keep_internal: bool | None = True) -> Any:
    """`rpc.deserialize_property(value, keep_unknowns, keep_internal)`: a Struct, a ListValue or a scalar, as the SDK's
    Struct wrapper hands them out."""
    if value == _UNKNOWN:
        return Unknown() if settings.is_dry_run() or keep_unknowns else None
    if isinstance(value, ListValue):
        return _read_list(value.values, keep_unknowns, keep_internal, _Secrets())
    if isinstance(value, Struct):
        return _secret_up(_read_struct(value, keep_unknowns, keep_internal, _Secrets()), None)
    return value


def _read_struct(struct: Struct, keep_unknowns: bool | None, keep_internal: bool | None, secrets: _Secrets) -> Any:
    fields = struct.fields
    if _SIG in fields:
        # An asset, an archive, a secret, a resource reference or an output value: the SDK's to rebuild.
        secrets.count += 1
        return _sdk_deserialize_properties(struct, keep_unknowns, keep_internal)
    output = {}
    for key, value in fields.items():
        if keep_internal is False and key.startswith("__") and key != "__provider":
            continue
        item = _read(value, keep_unknowns, keep_internal, secrets)
        # A value read as None is left out, as the SDK leaves it.
        if item is not None:
            output[key] = item
    return output


def _read(value: Value, keep_unknowns: bool | None, keep_internal: bool | None, secrets: _Secrets) -> Any:
    """One field's or item's value, as `rpc.deserialize_property` reads what the Struct wrapper hands it."""
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        text = value.string_value
        if text == _UNKNOWN:
            return Unknown() if settings.is_dry_run() or keep_unknowns else None
        return text
    if kind == "number_value":
        return value.number_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        before = secrets.count
        props = _read_struct(value.struct_value, keep_unknowns, keep_internal, secrets)
        return _secret_up(props, secrets) if secrets.count != before else props
    if kind == "list_value":
        return _read_list(value.list_value.values, keep_unknowns, keep_internal, secrets)
    if kind == "null_value":
        return None
    return _GetStructValue(value)  # a value with nothing set: the wrapper's own error


def _read_list(values: Any, keep_unknowns: bool | None, keep_internal: bool | None, secrets: _Secrets) -> list[Any]:
    before = secrets.count
    items = [_read(item, keep_unknowns, keep_internal, secrets) for item in values]
    if secrets.count != before and any(rpc.is_rpc_secret(item) for item in items):
        # As the SDK does: a list holding a secret is a secret list of plain values.
        secrets.count += 1
        return rpc.wrap_rpc_secret([rpc.unwrap_rpc_secret(item) for item in items])
    return items


def _secret_up(props: Any, secrets: _Secrets | None) -> Any:
    """A dict holding a secret made a secret dict of plain values, as `rpc.deserialize_property` makes it."""
    if isinstance(props, dict) and any(rpc.is_rpc_secret(item) for item in props.values()):
        if secrets is not None:
            secrets.count += 1
        return rpc.wrap_rpc_secret({key: rpc.unwrap_rpc_secret(item) for key, item in props.items()})
    return props


class _NotPlain(Exception):
    """A value `state_struct` leaves to the SDK."""


def state_struct(state: dict[str, Any]) -> Struct:
    """`_sync_await(rpc.serialize_properties(state, {}))`, as the SDK's mock monitor writes the mocks' answer: built
    by the same insertions in the same order (`Struct.__setitem__` per field, `Struct.update` and `ListValue.extend`
    within, which is what `_SetStructValue` does), so that its maps read back in the same order (upb's maps are read in
    an order their insertions make, which a copy of another map need not keep). A state holding anything but plain
    values and unknowns is the SDK's to write."""
    struct = Struct()
    try:
        fields = struct.fields
        for key in state:
            value = state[key]
            # A field that serializes to None is left out (only None does, among the values written here).
            if value is not None:
                _write(fields[key], value)
    except _NotPlain:
        return _sync_await(_sdk_serialize_properties(state, {}))
    return struct


def _write(target: Value, value: Any) -> None:
    """`_SetStructValue(target, serialize_property(value))` for plain values and unknowns."""
    kind = type(value)
    if kind is str:
        target.string_value = value
    elif kind is dict:
        struct = target.struct_value
        struct.Clear()  # as `_SetStructValue`: what makes an empty map a map
        fields = struct.fields
        for key, item in value.items():
            _write(fields[key], item)
    elif kind is bool:
        target.bool_value = value
    elif kind is float or kind is int:
        target.number_value = value
    elif value is None:
        target.null_value = 0  # type: ignore[assignment]
    elif kind is list or kind is tuple:
        items = target.list_value
        items.Clear()
        values = items.values
        for item in value:
            _write(values.add(), item)
    elif known_types.is_unknown(value):
        target.string_value = _UNKNOWN
    else:
        raise _NotPlain
