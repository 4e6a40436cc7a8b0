"""The analyzer requests the preview sends from the SDK's own serialized bytes (preview/policy_wire.py) are the very
requests PolicyPack builds from the recorded values (policy_runner.analyze_request, stack_request): for every custom
resource of every committed stack, its AnalyzeRequest and its entry in the AnalyzeStackRequest."""

from __future__ import annotations

import os
from typing import Any

import pytest
from google.protobuf import struct_pb2
from pulumi.runtime import rpc
from pulumi.runtime.proto import analyzer_pb2

from preview import policy_wire
from preview.engine import RecordedResource, evaluate
from preview.policy_runner import analyze_request, stack_request, wire_struct

from .helpers import ROOT, STACKS, raw_stack, stack_config_from_raw

PROVIDER_PREFIX = "pulumi:providers:"


def _heard(stack: str) -> list[tuple[RecordedResource, RecordedResource | None, bytes, bytes]]:
    """Each registration of the stack as the preview's listener hears it: the record, its provider's, and the two
    values the SDK serialized, as bytes (the listener must copy them: the messages are the SDK's)."""
    from platform_config.registry import REGISTRY_FILE_ENV
    from preview.registry_resolution import ProgramEnvironment, committed_lock

    heard = []

    def listener(record: RecordedResource, provider: RecordedResource | None, inputs: Any, state: Any) -> None:
        heard.append((record, provider, inputs.SerializeToString(), state.SerializeToString()))

    config = stack_config_from_raw(raw_stack(stack), None, None)
    lock = committed_lock(ROOT, config)
    environment = {} if lock is None or REGISTRY_FILE_ENV in os.environ else {REGISTRY_FILE_ENV: str(lock)}
    with ProgramEnvironment(environment):
        evaluate(ROOT, config, listener=listener)
    return heard


@pytest.mark.parametrize("stack", STACKS)
def test_the_requests_from_the_sdks_bytes_are_the_requests_from_the_records(stack: str) -> None:
    heard = _heard(stack)
    providers: dict[str, bytes] = {}
    fast = 0
    for record, provider, inputs, state in heard:
        inputs_wire = policy_wire.properties(struct_pb2.Struct.FromString(inputs), record.inputs)
        fast += policy_wire.serves(inputs)
        if record.type.startswith(PROVIDER_PREFIX):
            providers[record.urn] = policy_wire.provider_resource(record, inputs_wire)
            continue
        if not record.custom:
            continue
        sent = policy_wire.analyze_request(record, inputs_wire, providers[provider.urn] if provider else None)
        assert analyzer_pb2.AnalyzeRequest.FromString(sent) == analyze_request(record, provider), record.urn
        entry = policy_wire.stack_entry(record, policy_wire.properties(struct_pb2.Struct.FromString(state), record.outputs))
        (expected,) = stack_request([record]).resources
        assert analyzer_pb2.AnalyzerResource.FromString(entry) == expected, record.urn
    # The SDK's bytes serve nearly every resource (else this test would hold the fallback alone).
    assert fast > 0.9 * len(heard)


def test_a_value_the_sdk_decodes_differently_is_sent_as_recorded() -> None:
    """A null the SDK's decoding drops, and a secret nested in a value, whose secrecy it lifts to the top-level
    property: the request holds what the record holds, not what the program serialized."""
    serialized = struct_pb2.Struct()
    secret = {rpc._special_sig_key: rpc._special_secret_sig, "value": "s3cr3t"}
    serialized.update({"values": {"vpcId": None, "region": "us-east-1"}, "auth": {"token": secret}})
    recorded = rpc.deserialize_properties(serialized)
    wire = policy_wire.properties(serialized, recorded)
    assert struct_pb2.Struct.FromString(wire) == wire_struct(recorded)
    assert struct_pb2.Struct.FromString(wire) != serialized
