"""The Serving performance worker's serve mode (`preview/performance_worker.py --serve`, in `.venv-perf`), both ends
of its socket: after its first answer the worker stays up on a Unix domain socket, so the next preview whose servers
changed pays only the estimates, not Python's start, the package's import and its tables' loading (none of which can
be kept on disk); the preview (preview/performance_prediction.py) connects, sends, reads. It imports nothing of the
project.

One JSON request per connection, read to the end of what the client sends (at most MAX_REQUEST_BYTES, within
READ_SECONDS), one JSON answer back, the very bytes a fresh worker would write on stdout. A request that is not one
gets {"error": ...} and the worker serves on; one the package fails on gets {"error": ...} too, and the worker leaves
(what it keeps may be half built). A connection that sends nothing (a probe) is closed unanswered.

The worker leaves after `idle` seconds without a request, past its lifetime whatever it does, on SIGTERM, when its
socket file is removed or another takes its place, and when its package's installed files change (the next preview
starts a worker of the new files). The socket is bound under a lock beside it: a live worker there makes a second one
leave after its first answer; a dead one's socket file is removed and taken over."""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

MAX_REQUEST_BYTES = 64 << 20
MAX_ANSWER_BYTES = 256 << 20
# A client's connect: a worker there takes it at once (into its backlog, when busy), else the preview starts its own.
CONNECT_SECONDS = 0.5
READ_SECONDS = 10
SEND_SECONDS = 30
# How often a waiting worker checks that its socket file is still its own.
CHECK_SECONDS = 15
BACKLOG = 16

Answer = Callable[[dict[str, Any]], dict[str, Any]]


# --- the client's side (the preview, preview/performance_prediction.py) ---------------------------------------------


def connect(path: Path) -> socket.socket | None:
    """A connection to the worker on `path`, or None (none there, a dead one's socket file, or one too busy to take
    it within CONNECT_SECONDS)."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(CONNECT_SECONDS)
    try:
        connection.connect(str(path))
    except OSError:
        connection.close()
        return None
    return connection


def send_request(connection: socket.socket, text: str, timeout: float) -> None:
    """The request, then the end of it (the worker reads to that end)."""
    try:
        connection.settimeout(timeout)
        connection.sendall(text.encode())
        connection.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the worker left: received() finds no answer


def received(connection: socket.socket, deadline: float) -> Any:
    """The worker's answer, read to its end before `deadline` (time.monotonic), the connection closed; None where
    it sent no JSON (it left, it took too long, it sent more than MAX_ANSWER_BYTES)."""
    chunks, size = [], 0
    try:
        with connection:
            while True:
                connection.settimeout(max(deadline - time.monotonic(), 0.001))
                chunk = connection.recv(1 << 20)
                if not chunk:
                    break
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    return None
                chunks.append(chunk)
        return json.loads(b"".join(chunks).decode())
    except (OSError, ValueError):
        return None


def peer_pid(path: Path) -> int | None:
    """The process listening on `path`, as the kernel says (SO_PEERCRED), or None where none is."""
    probe = connect(path)
    if probe is None:
        return None
    with probe:
        pid, _, _ = struct.unpack("3i", probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return int(pid)


# --- the worker's side ------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Held by one worker of this socket at a time: binding it, or giving it up."""
    with open(path.with_name(path.name + ".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _alive(path: Path) -> bool:
    """Whether a worker answers on `path` (a socket file nobody listens on is a dead worker's)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1)
    try:
        probe.connect(str(path))
    except (FileNotFoundError, ConnectionRefusedError):
        return False
    except OSError:
        return True  # a full backlog, a timeout: someone is there, whatever it is, and it is not ours to remove
    finally:
        probe.close()
    return True


def listen(path: Path) -> tuple[socket.socket, int] | None:
    """The socket bound at `path` and its file's inode; None where another worker listens there already or it cannot
    be bound (this worker has answered its request, and leaves)."""
    try:
        with _locked(path):
            if _alive(path):
                return None
            path.unlink(missing_ok=True)
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                server.bind(str(path))
                server.listen(BACKLOG)
                return server, os.stat(path).st_ino
            except OSError:
                server.close()
                return None
    except OSError:
        return None


def _ours(path: Path, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False


def _read_request(connection: socket.socket) -> bytes | None:
    """What the client sent, to its end; None where it is more than MAX_REQUEST_BYTES."""
    connection.settimeout(READ_SECONDS)
    chunks, size = [], 0
    while chunk := connection.recv(1 << 16):
        size += len(chunk)
        if size > MAX_REQUEST_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _request_error(data: bytes | None) -> tuple[dict[str, Any] | None, str | None]:
    """The request, or why it is none (checked before the package sees it)."""
    if data is None:
        return None, f"a request is at most {MAX_REQUEST_BYTES} bytes"
    try:
        request = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, "the request is not JSON"
    if not isinstance(request, dict) or not isinstance(request.get("backendVersion"), str):
        return None, "the request is not {backendVersion, servers}"
    servers = request.get("servers")
    if not isinstance(servers, list) or not all(isinstance(s, dict) and isinstance(s.get("id"), str) for s in servers):
        return None, "the request's servers are not a list of servers with an id"
    return request, None


def _handle(connection: socket.socket, answer: Answer) -> bool | None:
    """Answer one connection: True when it carried a request and the worker serves on, False when the package failed
    on it (the worker leaves), None for a connection that asked nothing (a probe: not a use)."""
    try:
        data = _read_request(connection)
    except OSError:
        return None
    if data == b"":
        return None
    request, error = _request_error(data)
    serves_on = True
    if request is not None:
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                result = answer(request)
            reply = json.dumps(result)
        except Exception as failure:  # noqa: BLE001 - told to the client, which asks a fresh worker instead
            serves_on = False
            error = f"aiconfigurator failed: {type(failure).__name__}: {str(failure)[:300]}"
    if error is not None:
        reply = json.dumps({"error": error})
    try:
        connection.settimeout(SEND_SECONDS)
        connection.sendall(reply.encode())
    except OSError:
        pass  # the client left (a preview stopped early): the next one is served all the same
    return serves_on


def serve_arguments(argv: list[str]) -> tuple[Path, float, float] | None:
    """`--serve <socket> <idle seconds> <lifetime seconds>` (preview/performance_prediction.py starts it so), else
    None."""
    try:
        path, idle, lifetime = Path(argv[1]), float(argv[2]), float(argv[3])
    except (IndexError, ValueError):
        return None
    return (path, idle, lifetime) if argv[0] == "--serve" and len(argv) == 4 and idle > 0 and lifetime > 0 else None


def record_state(distribution: str) -> tuple[int, int, int] | None:
    """A distribution's RECORD as the file system has it (inode, change time, size): a reinstall rewrites it."""
    record = next((f for f in metadata.distribution(distribution).files or [] if f.name == "RECORD"), None)
    try:
        held = Path(str(record.locate())).stat() if record is not None else None
    except OSError:
        return None
    return (held.st_ino, held.st_mtime_ns, held.st_size) if held is not None else None


def _detach_stdio() -> None:
    """Stdin, stdout and stderr to /dev/null: the preview reads the first answer to their end, so they are closed once
    it is written, and nothing this process says later can block on a pipe nobody reads."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def serve(path: Path, idle: float, deadline: float, answer: Answer, unchanged: Callable[[], bool]) -> int:
    """Serve requests on `path` until idle for `idle` seconds or past `deadline` (time.monotonic), on SIGTERM, when its
    socket is no longer its own, the package fails on a request, or `unchanged()` says its package's files changed."""
    bound = listen(path)
    # Bound before its output closes: a preview that has read this worker's answer to its end finds it listening.
    _detach_stdio()
    if bound is None:
        return 0
    server, inode = bound
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    last, drain = time.monotonic(), False
    try:
        while True:
            left = min(last + idle, deadline) - time.monotonic()
            if left <= 0 or not _ours(path, inode):
                drain = left <= 0
                break
            ready, _, _ = select.select([server], [], [], min(left, CHECK_SECONDS))
            if not ready:
                continue
            connection, _ = server.accept()
            with connection:
                if not unchanged():
                    with contextlib.suppress(OSError):
                        connection.sendall(json.dumps({"error": "the package's files changed under this worker"}).encode())
                    break
                served = _handle(connection, answer)
            if served is False:
                break
            if served:
                last = time.monotonic()
    finally:
        _give_up(server, path, inode, answer if drain else None)
    return 0


def _give_up(server: socket.socket, path: Path, inode: int, answer: Answer | None) -> None:
    """Remove the socket file (while it is this worker's), so no new connection reaches it; leaving for its idle time
    or its lifetime (`answer` given), answer the connections queued already, so a preview that connected just before
    it left is not turned away (the others are refused, and their previews start a worker of their own)."""
    with contextlib.suppress(OSError), _locked(path):
        if _ours(path, inode):
            path.unlink()
    server.setblocking(False)
    with contextlib.suppress(OSError):
        while answer is not None:
            connection, _ = server.accept()
            connection.setblocking(True)
            with connection:
                if _handle(connection, answer) is False:
                    break
    server.close()
