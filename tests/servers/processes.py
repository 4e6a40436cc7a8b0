"""What every real server the tests start on loopback needs: free ports, and a stop that does not
hang on a server that ignores SIGTERM."""

from __future__ import annotations

import socket
import subprocess

STOP_SECONDS = 10


def free_ports(count: int) -> list[int]:
    """Loopback ports nothing listens on now (bound, then released, together)."""
    sockets = []
    try:
        for _ in range(count):
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            sockets.append(probe)
        return [int(probe.getsockname()[1]) for probe in sockets]
    finally:
        for probe in sockets:
            probe.close()


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after STOP_SECONDS; waits for the process either way."""
    process.terminate()
    try:
        process.wait(timeout=STOP_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
