"""The analyzer protocol's client, in a process of its own: what the Pulumi CLI does between the engine and a policy
pack, sending the requests the preview has already serialized (preview/policy_wire.py).

The preview writes frames on this process's stdin and reads its answers on stdout (FRAME: kind, number, length,
then the bytes). It sends each resource's AnalyzeRequest as the program registers it and each resource's entry of
the AnalyzeStackRequest beside it, and once the pack is configured the pack's port; once the program is done, the
stack's order. This process keeps a bounded window of Analyze calls in flight (the CLI analyzes steps concurrently
too, and the pack's server then never queues thousands of calls), and once the last answer is in, sends the
AnalyzeStackRequest the entries make in that order. It answers the non-empty AnalyzeResponses (by the number of
the request), then the AnalyzeStackResponse, or an error.

Apart from the preview so that the calls' client work (serializing nothing, but gRPC's own per call) does not take
the preview's interpreter lock from the program: the pack keeps up with the program, and checks the stack while the
preview renders. It imports grpc alone, run as a script: `python -P preview/policy_client.py` (-P: the script's folder
is not put on sys.path, where preview/selectors.py would hide the standard library's).
"""

from __future__ import annotations

import struct
import sys
import threading
import zlib
from array import array
from collections import deque
from typing import IO

import grpc

FRAME = struct.Struct(">cII")
# The preview's frames: the pack's port (after Configure), a resource's AnalyzeRequest, a stack entry (an
# AnalyzerResource) and the stack's order (the entries' numbers, array "I").
PORT, ANALYZE, ENTRY, STACK = b"P", b"A", b"R", b"S"
# This process's answers: an AnalyzeResponse by its request's number, the AnalyzeStackResponse, an error's text.
ANALYZED, STACK_ANALYZED, ERROR = b"a", b"s", b"e"
ANALYZE_METHOD = "/pulumirpc.Analyzer/Analyze"
ANALYZE_STACK_METHOD = "/pulumirpc.Analyzer/AnalyzeStack"
MAX_MESSAGE = 400 * 1024 * 1024


def read_frame(stream: IO[bytes]) -> tuple[bytes, int, bytes] | None:
    """The next frame, or None at the end of the stream."""
    head = stream.read(FRAME.size)
    if len(head) < FRAME.size:
        return None
    kind, number, length = FRAME.unpack(head)
    return kind, number, stream.read(length)


def frame(kind: bytes, number: int, data: bytes) -> bytes:
    return FRAME.pack(kind, number, len(data)) + data


def length_delimited(number: int, data: bytes) -> bytes:
    """A protobuf field `number` holding `data` (a message or a string): its key, its length, the bytes."""
    return varint(number << 3 | 2) + varint(len(data)) + data


def varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class _Frames:
    """The preview's frames, read on a thread of their own as they come (the preview never waits on a full pipe):
    the requests in order, the stack's entries as the AnalyzeStackRequest's fields, one after another, compressed as
    they come (where each begins and ends in the whole by number), the port and the stack's order when they come.

    Compressed (zlib, level 1) because they are held until the program is done, when the program's process is at its
    largest: at 1,000 models 150 MB of entries, a tenth of that compressed, at about a second of this process's CPU
    on the other core."""

    def __init__(self, stream: IO[bytes]):
        self._stream = stream
        self._ready = threading.Condition()
        self.requests: deque[tuple[int, bytes]] = deque()
        self._compressor = zlib.compressobj(1)
        self._compressed: list[bytes] = []
        self._length = 0
        self.spans: dict[int, tuple[int, int]] = {}
        self.port: int | None = None
        self.order: array | None = None
        self.ended = False
        threading.Thread(target=self._read, name="frames", daemon=True).start()

    def _read(self) -> None:
        while (item := read_frame(self._stream)) is not None:
            kind, number, data = item
            with self._ready:
                if kind == ANALYZE:
                    self.requests.append((number, data))
                elif kind == ENTRY:
                    field = length_delimited(1, data)
                    self._compressed.append(self._compressor.compress(field))
                    self.spans[number] = (self._length, self._length + len(field))
                    self._length += len(field)
                elif kind == PORT:
                    self.port = int(data)
                elif kind == STACK:
                    self.order = array("I")
                    self.order.frombytes(data)
                self._ready.notify()
        with self._ready:
            self.ended = True
            self._ready.notify()

    def next(self) -> tuple[int, bytes] | None:
        """The next AnalyzeRequest once the pack is configured, or None once the stack's order came (or the stream
        ended) and every request before it was taken."""
        with self._ready:
            while True:
                if self.port is not None:
                    if self.requests:
                        return self.requests.popleft()
                    if self.order is not None:
                        return None
                if self.ended:
                    return None
                self._ready.wait()

    def wait_end(self) -> None:
        with self._ready:
            while not self.ended:
                self._ready.wait()

    def entries(self) -> bytes:
        """Every entry's field, in the order they came (once: what was kept compressed is let go)."""
        self._compressed.append(self._compressor.flush())
        compressed, self._compressed = self._compressed, []
        return zlib.decompress(b"".join(compressed))


def stack_request(frames: _Frames) -> bytes:
    """The AnalyzeStackRequest: the entries' fields in the stack's order, copied once out of the entries as they came,
    which are then let go (a stack's entries are held twice at most, never three times: the entries and the request,
    then the request and gRPC's copy of it as it sends)."""
    with memoryview(frames.entries()) as view:
        request = b"".join(view[frames.spans[number][0] : frames.spans[number][1]] for number in frames.order or ())
    frames.spans = {}
    return request


def serve(frames: _Frames, out: IO[bytes], in_flight: int) -> None:
    """The exchange: every Analyze, then AnalyzeStack (see the module's docstring)."""
    first = frames.next()
    if frames.port is None:
        return
    options = [("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE)]
    with grpc.insecure_channel(f"127.0.0.1:{frames.port}", options=options) as channel:
        analyze = channel.unary_unary(ANALYZE_METHOD)
        window: deque[tuple[int, grpc.Future]] = deque()
        answers: list[bytes] = []

        def settle(number: int, call: grpc.Future) -> None:
            answer = call.result()
            if answer:
                answers.append(frame(ANALYZED, number, answer))

        item = first
        while item is not None:
            number, request = item
            window.append((number, analyze.future(request)))
            if len(window) >= in_flight:
                settle(*window.popleft())
            item = frames.next()
        while window:
            settle(*window.popleft())
        if frames.order is None:
            return
        stack_answer = channel.unary_unary(ANALYZE_STACK_METHOD)(stack_request(frames))
    out.write(b"".join(answers) + frame(STACK_ANALYZED, 0, stack_answer))
    out.flush()


def main() -> None:
    in_flight = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    out = sys.stdout.buffer
    frames = _Frames(sys.stdin.buffer)
    try:
        serve(frames, out, in_flight)
    except grpc.RpcError as error:
        out.write(frame(ERROR, 0, str(error.details()).encode()))
        out.flush()
    # Until the preview has read the answer and closes the pipe (it reads this process's CPU time first).
    frames.wait_end()


if __name__ == "__main__":
    main()
