"""The analyzer requests as bytes, from what the SDK has already serialized.

A resource's AnalyzeRequest carries its inputs and its entry in the AnalyzeStackRequest its state, each in the
engine's wire form (policy_runner.wire_struct of what the preview recorded). The program's SDK has serialized both
already: the registration's `object` (the inputs) and the mock monitor's answer (the state, pulumi/runtime/mocks.py
MockMonitor.RegisterResource: `rpc.serialize_properties(state)`). Those bytes are the wire form itself but where
the SDK's decoding changed the value on its way into the record (pulumi/runtime/rpc.py, pulumi 3.272.0:
`deserialize_properties` drops a key whose value is null, e.g. a Helm release's `values.vpcId: null`, and turns a
secret, asset or resource reference, all marked with `_special_sig_key`, into a value of its own, a nested secret
lifting its secrecy to the top-level property). So the bytes serve where they hold neither a null (a Value's
`null_value`, field 1, written as the bytes 08 00) nor that key; elsewhere (or where those bytes happen to occur
inside some other value) the request is built from the record as before. The rest of each request (type, URN,
name, options, parent, dependencies) is a small message serialized here, the properties appended as their field:
protobuf reads fields in any order (tests/test_policy_wire.py holds every committed stack's requests to the ones
PolicyPack builds).
"""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2
from pulumi.runtime import rpc
from pulumi.runtime.proto import analyzer_pb2

from .engine import RecordedResource
from .policy_client import length_delimited
from .policy_runner import wire_struct

_NULL = b"\x08\x00"
_SIGNATURE = rpc._special_sig_key.encode()
# The properties' field number in AnalyzeRequest, AnalyzerResource and AnalyzerProviderResource alike.
PROPERTIES = 2
# The provider's field number in AnalyzeRequest.
PROVIDER = 6


def properties(serialized: struct_pb2.Struct, recorded: dict[str, Any]) -> bytes:
    """The wire form of `recorded`: the SDK's own serialization of it where that is the same (see the module's
    docstring), else wire_struct's."""
    data = serialized.SerializeToString()
    return data if serves(data) else wire_struct(recorded).SerializeToString()


def serves(data: bytes) -> bool:
    """Whether the SDK's serialized value is also the recorded value's wire form: it holds no null and no special
    value (see the module's docstring)."""
    return _NULL not in data and _SIGNATURE not in data


def provider_resource(provider: RecordedResource, wire: bytes) -> bytes:
    """An AnalyzerProviderResource: the provider's type, URN and name, and its inputs' wire form."""
    head = analyzer_pb2.AnalyzerProviderResource(type=provider.type, urn=provider.urn, name=provider.name)
    return head.SerializeToString() + length_delimited(PROPERTIES, wire)


def analyze_request(resource: RecordedResource, wire: bytes, provider: bytes | None) -> bytes:
    """A resource's AnalyzeRequest (PolicyPack._analyze_request's), its inputs' wire form and its provider's
    AnalyzerProviderResource given as bytes."""
    head = analyzer_pb2.AnalyzeRequest(
        type=resource.type,
        urn=resource.urn,
        name=resource.name,
        options=analyzer_pb2.AnalyzerResourceOptions(parent=resource.parent or ""),
    )
    tail = length_delimited(PROVIDER, provider) if provider is not None else b""
    return head.SerializeToString() + length_delimited(PROPERTIES, wire) + tail


def stack_entry(resource: RecordedResource, wire: bytes) -> bytes:
    """A resource's AnalyzerResource in the AnalyzeStackRequest (PolicyPack.analyze_stack's), its state's wire form
    given as bytes."""
    head = analyzer_pb2.AnalyzerResource(
        type=resource.type,
        urn=resource.urn,
        name=resource.name,
        options=analyzer_pb2.AnalyzerResourceOptions(parent=resource.parent or ""),
        parent=resource.parent or "",
        dependencies=resource.dependencies,
    )
    return head.SerializeToString() + length_delimited(PROPERTIES, wire)
