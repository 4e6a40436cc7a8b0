"""The analyzer protocol's client (preview/policy_client.py) makes the AnalyzeStackRequest of the entries the preview
sent, in the stack's order, from what it kept compressed as they came."""

from __future__ import annotations

import io
import os
from array import array

from google.protobuf.struct_pb2 import Struct
from pulumi.runtime.proto import analyzer_pb2

from preview.policy_client import ENTRY, PORT, STACK, _Frames, frame, stack_request


def _entry(urn: str, size: int) -> bytes:
    properties = Struct()
    properties.update({"metadata": {"name": urn}, "data": {"blob": os.urandom(size).hex(), "same": "x" * size}})
    return analyzer_pb2.AnalyzerResource(type="kubernetes:core/v1:ConfigMap", urn=urn, properties=properties).SerializeToString()


def test_the_stack_request_is_the_entries_in_the_stacks_order() -> None:
    entries = {number: _entry(f"urn:{number}", size) for number, size in enumerate([10, 70_000, 0, 3_000, 250_000])}
    arrived = [3, 0, 4, 1, 2]
    order = array("I", [4, 2, 0, 3, 1])
    stream = io.BytesIO(
        b"".join(frame(ENTRY, number, entries[number]) for number in arrived)
        + frame(PORT, 0, b"50051")
        + frame(STACK, 0, order.tobytes())
    )
    frames = _Frames(stream)
    frames.wait_end()
    sent = analyzer_pb2.AnalyzeStackRequest.FromString(stack_request(frames))
    assert [r.SerializeToString() for r in sent.resources] == [entries[number] for number in order]
    assert frames.port == 50051 and frames.spans == {}
