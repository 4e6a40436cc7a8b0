"""aiconfigurator's answer for the program's `servingShapes`: the request the Serving performance stage sends its
worker (`preview/performance_worker.py`, in `.venv-perf`), and the answers kept per request (read back when the same
servers were asked before, with no worker started); a worker already running asked first, over its socket, else one
started that stays up for the next previews (`preview/performance_serve.py`); the latency plot
(`preview/performance_plot.py`), and the install's warm-up of the worker (`python -m preview.performance_prediction
--warm`)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import selectors
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from platform_config.gpu_catalog import GPU_MODELS

from .performance_serve import connect, peer_pid, received, send_request
from .report import PROJECT_ROOT, shown_path, shown_paths
from .stack_config import StackConfigError

# The vLLM version of the database's measurements the predictions come from (aiconfigurator-core 0.12.0 holds
# vLLM 0.24.0 tables for h100_sxm; the servers run the pinned vLLM, a later release).
DATABASE_VLLM_VERSION = "0.24.0"
PLOT_FILE = "performance.png"
# The concurrencies a prediction is made at: these up to the server's maxNumSeqs, and maxNumSeqs itself.
CONCURRENCY_STEPS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
WORKER_TIMEOUT_SECONDS = 120
PLOT_TIMEOUT_SECONDS = 60


def performance_python() -> Path:
    """The interpreter of the virtualenv aiconfigurator is installed in (`make perf-venv`), or PERFORMANCE_PYTHON."""
    return Path(os.environ.get("PERFORMANCE_PYTHON") or PROJECT_ROOT / ".venv-perf" / "bin" / "python")


# Answers kept per request: the same servers on the same package give the same figures (the tables are data), so a
# preview whose servers did not change reads them back instead of running aiconfigurator again.
CACHE_DIR_ENV = "PERFORMANCE_CACHE_DIR"


def cache_dir() -> Path:
    """build/performance-cache, or PERFORMANCE_CACHE_DIR (the bench's cold runs give a fresh one)."""
    return Path(os.environ.get(CACHE_DIR_ENV) or PROJECT_ROOT / "build" / "performance-cache")


def _installed(python: Path) -> list[str]:
    """What the virtualenv holds, by its distributions' dist-info folders (Python version, name and version each):
    where it is does not matter, so two checkouts with the same packages (a pull request's and its default
    branch's, in CI) share their answers. An interpreter outside a virtualenv (PERFORMANCE_PYTHON) shows no such
    folders there: it is named by its own path instead, so at least two interpreters never share an answer."""
    venv = python.parent.parent
    held = sorted(str(p.relative_to(venv)) for p in venv.glob("lib/python*/site-packages/*.dist-info"))
    return held or [str(python.resolve())]


# What a worker is, besides the request it is asked: its code and the packages it runs on.
WORKER_SOURCES = ("performance_worker.py", "performance_serve.py", "performance-requirements.txt")


def _worker_digest(python: Path) -> str:
    """The worker's code, the pinned packages and what the virtualenv holds: a worker of any other has another."""
    digest = hashlib.sha256()
    for name in WORKER_SOURCES:
        digest.update(Path(__file__).with_name(name).read_bytes())
    digest.update(json.dumps(_installed(python)).encode())
    return digest.hexdigest()


def _cache_key(asked: dict[str, Any], python: Path) -> str:
    """The request with the worker's digest: any change to either is a new key."""
    digest = hashlib.sha256(json.dumps(asked, sort_keys=True).encode())
    digest.update(_worker_digest(python).encode())
    return digest.hexdigest()[:32]


# A worker stays up this long after its last request (0: it answers one preview and exits), and never longer than
# WORKER_LIFETIME_SECONDS after it started.
WORKER_IDLE_ENV = "PERFORMANCE_WORKER_IDLE_SECONDS"
WORKER_IDLE_SECONDS = 600
WORKER_LIFETIME_SECONDS = 7200
# The workers' sockets, in the cache folder: a folder only this user may enter, so no one else can answer in their
# place or ask them.
WORKERS_FOLDER = "workers"
# What a Unix socket's address holds (sun_path: 108 bytes with the terminating NUL).
SOCKET_PATH_BYTES = 107


def worker_idle_seconds() -> int:
    """PERFORMANCE_WORKER_IDLE_SECONDS, else WORKER_IDLE_SECONDS; refused (exit 2) where it is no whole number of
    seconds within the worker's lifetime."""
    text = os.environ.get(WORKER_IDLE_ENV, "")
    if text == "":
        return WORKER_IDLE_SECONDS
    if not re.fullmatch(r"[0-9]{1,5}", text) or int(text) > WORKER_LIFETIME_SECONDS:
        raise StackConfigError(
            f"{WORKER_IDLE_ENV}: give a whole number of seconds from 0 (no worker stays up) to {WORKER_LIFETIME_SECONDS}, "
            f"not {text[:40]!r}"
        )
    return int(text)


def worker_socket(python: Path, cache: Path | None = None) -> tuple[Path, None] | tuple[None, str]:
    """Where the worker of this code and these packages listens, `<cache>/workers/<digest>.sock` (`cache_dir()` by
    default, made absolute: the worker binds it from the project's folder, the preview connects from its own), or why
    none can: the path is longer than a socket's address holds, or the folder is not this user's alone (another could
    answer in a worker's place). Paths shown as the report shows them; where the folder is `cache_dir()`'s, what to set
    for another."""
    folder = (cache or cache_dir()).absolute() / WORKERS_FOLDER
    path = folder / f"{_worker_digest(python)[:24]}.sock"
    shown, elsewhere = shown_path(folder), "" if cache is not None else f"; set {CACHE_DIR_ENV} to another folder"
    size = len(os.fsencode(path))
    if size > SOCKET_PATH_BYTES:
        room = SOCKET_PATH_BYTES - (size - len(os.fsencode(folder.parent)))
        hint = "" if cache is not None else f": set {CACHE_DIR_ENV} to a folder whose absolute path is at most {room} bytes"
        holds = f"a socket's address holds {SOCKET_PATH_BYTES}"
        return None, f"its socket, {shown_path(path)}, is {size} bytes in full, {holds}{hint}"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        held = folder.lstat()
    except OSError as error:
        return None, f"{shown} cannot be made: {error.strerror or error}{elsewhere}"
    if not stat.S_ISDIR(held.st_mode):
        return None, f"{shown} is {'a symbolic link' if stat.S_ISLNK(held.st_mode) else 'no folder'}{elsewhere}"
    if held.st_uid != os.getuid():
        return None, f"{shown} belongs to user {held.st_uid}, not to this one ({os.getuid()}){elsewhere}"
    if held.st_mode & 0o077:
        opened = "writable" if held.st_mode & 0o022 else "readable"
        mode = stat.S_IMODE(held.st_mode)
        return None, f"{shown} is {opened} by others than its owner (mode {mode:04o}, not 0700: chmod 700 it)"
    return path, None


def worker_pid(path: Path) -> int | None:
    """The worker listening on `path` (for the benchmark, which counts its CPU time, and the tests, which stop the
    workers they start), or None."""
    return peer_pid(path)


def _write_request(stdin: IO[str], text: str) -> None:
    try:
        stdin.write(text)
        stdin.close()
    except (OSError, ValueError):
        pass  # it failed, or was stopped, on its own; answer() says how


def _valid(answer: Any) -> dict[str, Any] | None:
    return answer if isinstance(answer, dict) and isinstance(answer.get("servers"), dict) else None


def _read_answer(path: Path) -> dict[str, Any] | None:
    """A kept answer, or None where there is none or it cannot be read (a run stopped while writing it)."""
    try:
        return _valid(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def _read_to_end(process: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """The worker's stdout and stderr to their end, which is its exit or, for one that stays up, its answer written
    (it closes them then: `communicate()` would wait for its exit as well). TimeoutExpired after `timeout`."""
    deadline = time.monotonic() + timeout
    read: dict[int, list[bytes]] = {}
    with selectors.DefaultSelector() as selector:
        for stream in (process.stdout, process.stderr):
            assert stream is not None
            selector.register(stream.fileno(), selectors.EVENT_READ)
            read[stream.fileno()] = []
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(process.args, timeout)
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 1 << 20)
                if chunk:
                    read[key.fd].append(chunk)
                else:
                    selector.unregister(key.fd)
    assert process.stdout is not None and process.stderr is not None
    stdout, stderr = (b"".join(read[s.fileno()]).decode(errors="replace") for s in (process.stdout, process.stderr))
    process.stdout.close()
    process.stderr.close()
    return stdout, stderr


@dataclass
class Prediction:
    """aiconfigurator's answer for the program's `servingShapes`: read back from the cache when the same request was
    answered before, else asked of the worker already running (its socket, `worker_socket`), else of one started and
    sent the request when the program exports the shapes (its first export, before it registers a resource), which
    then stays up `idle_seconds` for the next previews; waited for by `answer()` after the other stages."""

    python: Path | None
    problem: str | None = None
    cached: bool = False
    # How long a worker this preview starts stays up for the next ones (0: it answers and exits).
    idle_seconds: int = 0
    # Who answered: "kept answer", "running worker" or "new worker" (None: nobody was asked).
    answered_by: str | None = None
    # Why no worker stays up for the next previews (`worker_socket`), where one would (idle_seconds > 0).
    no_worker: str | None = None
    _process: subprocess.Popen[str] | None = field(default=None, init=False)
    _connection: socket.socket | None = field(default=None, init=False)
    _socket: Path | None = field(default=None, init=False)
    _asked: dict[str, Any] | None = field(default=None, init=False)
    _answer: dict[str, Any] | None = field(default=None, init=False)
    _folder: Path | None = field(default=None, init=False)

    @classmethod
    def of_perf_venv(cls, idle_seconds: int = 0) -> Prediction:
        """The stage's prediction, its worker not started yet: a preview whose servers were asked before reads their
        answer back and starts none (importing the package alone takes about a CPU-second the program and the pack
        would otherwise share their two cores with)."""
        python = performance_python()
        if not python.exists():
            return cls(None, problem=f"not run: {python.name} of .venv-perf is missing (`make perf-venv` installs it)")
        return cls(python, idle_seconds=idle_seconds)

    def _start(self) -> None:
        """The worker, sent the request on stdin; it stays up for the next previews where it has a socket to listen
        on, in a session of its own (a Ctrl-C of this preview's terminal does not reach it; `stop()` does, until it
        has answered). The problem said where the interpreter cannot start."""
        assert self.python is not None and self._asked is not None
        command = [str(self.python), "-m", "preview.performance_worker"]
        if self._socket is not None:
            command += ["--serve", str(self._socket), str(self.idle_seconds), str(WORKER_LIFETIME_SECONDS)]
        try:
            self._process = subprocess.Popen(
                command,
                cwd=PROJECT_ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=self._socket is not None,
            )
        except OSError as error:
            self.problem = f"not run: {shown_paths(str(self.python))} does not start: {error.strerror or error}"
            return
        self.answered_by = "new worker"
        assert self._process.stdin is not None
        # Written from a thread: the worker reads its request only once it has imported the package, and a request
        # larger than the pipe holds (hundreds of servers) would otherwise stop the program until then, or for good
        # if the worker's own output filled its pipes meanwhile; answer() reads those.
        stdin, self._process.stdin = self._process.stdin, None
        threading.Thread(target=_write_request, args=(stdin, json.dumps(self._asked)), daemon=True).start()

    def send(self, shapes: list[dict[str, Any]] | None) -> None:
        """Ask for every server whose architecture is known (none: no worker is started), once: the stage
        sends the servers as the program exports them, then as its outputs resolved them, the same request. Another
        one would have no answer: the stage says so rather than judge the servers by the first."""
        asked = request(shapes or [])
        if self._asked is not None:
            if asked != self._asked:
                self.stop()
                self._answer = None
                self.problem = "not run: the program's servingShapes changed after it exported them"
            return
        self._asked = asked
        if self.python is None or not asked["servers"]:
            return
        self._folder = cache_dir() / _cache_key(asked, self.python)
        # Said even when the answer is kept: the next preview whose servers change pays the start all the same.
        if self.idle_seconds > 0:
            self._socket, self.no_worker = worker_socket(self.python)
        kept = _read_answer(self._folder / "answer.json")
        if kept is not None:
            self._answer = kept
            self.cached = True
            self.answered_by = "kept answer"
            return
        self._connection = connect(self._socket) if self._socket is not None else None
        if self._connection is None:
            self._start()
            return
        self.answered_by = "running worker"
        # From a thread too: the running worker may be answering another preview first.
        request_text = json.dumps(asked)
        threading.Thread(target=send_request, args=(self._connection, request_text, WORKER_TIMEOUT_SECONDS), daemon=True).start()

    def on_export(self, output: str) -> Callable[[str, Any], None]:
        """Told of each stack output as the program exports it (preview/engine.py evaluate): the servers are sent as the
        program exports `output`, so aiconfigurator predicts while the program's registrations drain and the other
        stages run."""

        def exported(name: str, value: Any) -> None:
            if name == output and isinstance(value, dict):
                self.send(value.get("servers"))

        return exported

    def stop(self) -> None:
        """For a run that stops before it reads the answer, or needs none: no worker that has not answered outlives the
        preview (one that has, and stays up, is no longer this preview's)."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.communicate()
        self._process = None

    def answer(self) -> dict[str, Any] | None:
        if self._answer is not None or (self._connection is None and self._process is None):
            return self._answer
        if self._connection is not None:
            connection, self._connection = self._connection, None
            self._answer = _valid(received(connection, time.monotonic() + WORKER_TIMEOUT_SECONDS))
            if self._answer is None:
                self._start()  # it left, or failed: a worker of this preview's own answers, or says why
        if self._answer is None and self._process is not None:
            self._answer = self._worker_answer(self._process)
        if self._answer is not None:
            assert self._folder is not None
            # Whole or not at all: a preview stopped mid-write leaves no half answer for the next to read.
            self._folder.mkdir(parents=True, exist_ok=True)
            partial = self._folder / f"answer.json.{os.getpid()}"
            partial.write_text(json.dumps(self._answer))
            os.replace(partial, self._folder / "answer.json")
        return self._answer

    def _worker_answer(self, process: subprocess.Popen[str]) -> dict[str, Any] | None:
        """The answer of the worker this preview started, once it has written it; None, the problem said, where it
        failed or took too long. A worker that stays up is left running once it has answered."""
        try:
            stdout, stderr = _read_to_end(process, WORKER_TIMEOUT_SECONDS)
            if self._socket is None:
                process.wait(timeout=WORKER_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self.stop()
            self.problem = f"aiconfigurator did not answer within {WORKER_TIMEOUT_SECONDS} s"
            return None
        # One that stays up closes its output once its answer is whole; one that does not has exited by now.
        try:
            answer = _valid(json.loads(stdout)) if self._socket is not None or process.returncode == 0 else None
        except ValueError:
            answer = None
        if answer is None:
            self.stop()
            self.problem = f"aiconfigurator failed: {shown_paths((stderr.strip().splitlines() or ['no output'])[-1][:300])}"
            return None
        self._process = None
        return answer


def _no_prediction(row: dict[str, Any]) -> str | None:
    """Why a server gets no latency prediction (None: it gets one, from its system or scaled from it)."""
    if row["runner"] != "generate":
        return "an embedding model: aiconfigurator predicts generation, not pooling"
    if row["device"]["kind"] == "timeSliced":
        return "a time-sliced share runs as fast as the other pods on its GPU let it"
    if row["system"] is None:
        return f"aiconfigurator has no system for {row['gpu']}"
    architecture = row["architecture"]
    if architecture is None or architecture["performanceModel"] is None:
        return "the database measures only the models it ships a config for (architecture.performanceModel)"
    return None


def request(shapes: list[dict[str, Any]]) -> dict[str, Any]:
    """The worker's request: every server whose architecture is known (where the plot goes is set when it is sent:
    the answer's cache folder, whose key is this request)."""
    servers = []
    for row in shapes:
        if row["architecture"] is None:
            continue
        why = _no_prediction(row)
        seqs = row["maxNumSeqs"]
        predict = None
        if why is None:
            steps = sorted({*(c for c in CONCURRENCY_STEPS if c < seqs), seqs})
            predict = {"isl": row["peak"]["promptTokens"], "osl": row["peak"]["outputTokens"], "concurrency": steps}
        servers.append(
            {
                "id": f"{row['model']}/{row['version']}",
                "performanceModel": row["architecture"]["performanceModel"],
                "config": row["architecture"]["config"],
                "system": row["system"],
                "tp": row["tensorParallel"],
                "capacityBytes": row["device"]["capacityBytes"],
                "memoryFraction": row["memoryFraction"],
                "maxNumBatchedTokens": row["maxNumBatchedTokens"],
                "maxModelLen": row["maxModelLen"],
                # A MIG slice is predicted as the whole GPU, then scaled (`_scaled`).
                "predict": predict,
                "noPrediction": why,
            }
        )
    return {"backendVersion": DATABASE_VLLM_VERSION, "servers": servers}


def draw_plot(python: Path, servers: list[dict[str, Any]], path: Path) -> str | None:
    """The latency plot of `servers` (preview/performance_plot.py, in the worker's virtualenv) written to `path`; None
    when it is, else why not."""
    try:
        drawn = subprocess.run(
            [str(python), "-m", "preview.performance_plot", str(path)],
            cwd=PROJECT_ROOT,
            input=json.dumps({"servers": servers}),
            capture_output=True,
            text=True,
            timeout=PLOT_TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired:
        return f"not drawn within {PLOT_TIMEOUT_SECONDS} s"
    except OSError as error:
        return f"{shown_paths(str(python))} does not start: {error.strerror or error}"
    if drawn.returncode != 0:
        return shown_paths((drawn.stderr.strip().splitlines() or ["no output"])[-1][:300])
    return None


def warm_up() -> int:
    """`make perf-venv`'s last step: the worker keeps, beside its packages, what aiconfigurator derives from the tables
    of each system the GPU catalog predicts on, whatever the request (preview/performance_worker.py warm)."""
    python = performance_python()
    systems = sorted({gpu.performance_system for gpu in GPU_MODELS.values() if gpu.performance_system})
    command = [str(python), "-m", "preview.performance_worker", "--warm", DATABASE_VLLM_VERSION, *systems]
    return subprocess.run(command, cwd=PROJECT_ROOT, check=False).returncode


if __name__ == "__main__":
    if sys.argv[1:] != ["--warm"]:
        print("usage: python -m preview.performance_prediction --warm", file=sys.stderr)
        sys.exit(2)
    sys.exit(warm_up())
