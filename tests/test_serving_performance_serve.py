"""The Serving performance worker that stays up between previews (preview/performance_serve.py, the worker's
`--serve`) and how the preview asks it (preview/performance_prediction.py): the same answer, to the byte, as a fresh
worker's; a request that is none answered with an error; a second worker racing for the socket leaving; the worker
leaving by itself when idle; a dead worker's socket taken over; a worker of other code or packages never asked; a
worker that has not answered stopped with its preview, one that has left running; the idle time's setting; where no
worker can stay up (a socket path too long, a workers' folder open to others), the stage saying why."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from preview import performance_prediction
from preview.performance import performance_section
from preview.performance_prediction import Prediction, _read_to_end, worker_idle_seconds, worker_pid, worker_socket
from preview.report import Section, shown_path
from preview.stack_config import StackConfigError

from .helpers import ROOT
from .performance_helpers import PERF_PYTHON, needs_database


def _server(server_id: str, model: str | None, tp: int, concurrency: list[int] | None, config=None) -> dict:
    return {
        "id": server_id,
        "performanceModel": model,
        "config": config,
        "system": "h100_sxm",
        "tp": tp,
        "capacityBytes": 80 * 2**30,
        "memoryFraction": 0.9,
        "maxNumBatchedTokens": 8192,
        "maxModelLen": 4096,
        "predict": {"isl": 1024, "osl": 256, "concurrency": concurrency} if concurrency else None,
        "noPrediction": None,
    }


# A declared architecture (sized, not predicted: the package keeps what it read of it by its folder's path).
DECLARED = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 131072,
    "vocab_size": 128256,
    "torch_dtype": "bfloat16",
}
# What the worker is asked first, and then what it is compared on with a fresh worker: other shapes on the same
# system, so the second is answered from tables, views and memos the first loaded.
FIRST = {
    "backendVersion": "0.24.0",
    "servers": [
        _server("big/v1", "meta-llama/Meta-Llama-3.1-70B", 4, [1, 8]),
        _server("a/v1", "meta-llama/Meta-Llama-3.1-8B", 1, [2]),
    ],
}
COMPARED = {
    "backendVersion": "0.24.0",
    "servers": [
        _server("a/v1", "meta-llama/Meta-Llama-3.1-8B", 1, [1, 4, 12]),
        _server("declared/v1", None, 1, None, DECLARED),
        {**_server("l4/v1", "meta-llama/Meta-Llama-3.1-8B", 1, [1]), "system": "l4", "capacityBytes": 24 * 2**30},
    ],
}


@pytest.fixture
def short_folder() -> Iterator[Path]:
    """A folder whose sockets' paths fit a socket's address (pytest's own temporary paths may not); every worker
    still listening in it is stopped at the end."""
    folder = Path(tempfile.mkdtemp(prefix="pw-", dir="/tmp"))
    try:
        yield folder
    finally:
        for path in folder.rglob("*.sock"):
            pid = worker_pid(path)
            if pid is not None:
                os.kill(pid, signal.SIGTERM)
        subprocess.run(["rm", "-rf", str(folder)], check=False)


def _serving(path: Path, idle: int) -> subprocess.Popen[str]:
    command = [str(PERF_PYTHON), "-m", "preview.performance_worker", "--serve", str(path), str(idle), "600"]
    options = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    return subprocess.Popen(command, cwd=ROOT, start_new_session=True, **options)  # type: ignore[call-overload]


def _ask(path: Path, data: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(60)
        connection.connect(str(path))
        connection.sendall(data)
        connection.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := connection.recv(1 << 16):
            chunks.append(chunk)
    return b"".join(chunks)


def _gone(pid: int, within: float) -> bool:
    """Whether the process has exited within `within` seconds (a child of this process not yet waited for counts)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.2)
    return False


@needs_database
def test_a_worker_that_stays_up_answers_as_a_fresh_one_to_the_byte_and_leaves_when_idle(short_folder):
    """Two workers started at once for one socket both answer their preview; one stays up, the other leaves. Asked
    through the socket about other servers, the one that stayed answers the very bytes a fresh worker writes; a
    request that is none gets an error and it serves on; idle, it leaves by itself and removes its socket."""
    fresh = subprocess.run(
        [str(PERF_PYTHON), "-m", "preview.performance_worker"],
        cwd=ROOT,
        input=json.dumps(COMPARED),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    path = short_folder / "w.sock"
    workers = [_serving(path, idle=6) for _ in range(2)]
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write(json.dumps(FIRST))
        worker.stdin.close()
    # Each closes its output once it has answered: the one that stays up is listening by then.
    firsts = [_read_to_end(worker, 120)[0] for worker in workers]
    assert json.loads(firsts[0])["servers"]["big/v1"]["predictions"] and firsts[0] == firsts[1]
    serving = worker_pid(path)
    (left,) = [w for w in workers if w.pid != serving]
    assert serving in {w.pid for w in workers} and left.wait(timeout=30) == 0
    assert _ask(path, json.dumps(COMPARED).encode()).decode() == fresh
    assert json.loads(_ask(path, b'{"servers": ')) == {"error": "the request is not JSON"}
    assert json.loads(_ask(path, b'{"backendVersion": "0.24.0", "servers": [1]}'))["error"].startswith("the request's servers")
    assert _ask(path, json.dumps(COMPARED).encode()).decode() == fresh
    assert serving is not None and _gone(serving, within=30)
    assert not path.exists()


def _row(model: str = "meta-llama/Meta-Llama-3.1-8B", max_num_seqs: int = 4) -> dict:
    """One servingShapes row (components/plan_reports.py serving_shapes), as the program exports it."""
    return {
        "model": "m",
        "version": "v1",
        "architecture": {"performanceModel": model, "config": None},
        "runner": "generate",
        "device": {"kind": "wholeGpu", "capacityBytes": 80 * 2**30},
        "system": "h100_sxm",
        "gpu": "H100-80GB",
        "maxNumSeqs": max_num_seqs,
        "peak": {"promptTokens": 512, "outputTokens": 128},
        "tensorParallel": 1,
        "memoryFraction": 0.9,
        "maxNumBatchedTokens": 8192,
        "maxModelLen": 4096,
    }


@needs_database
def test_the_preview_asks_the_running_worker_and_starts_one_where_there_is_none(short_folder, monkeypatch):
    """A dead worker's socket file: the preview starts a worker, which takes the socket over and stays up once it
    has answered (stop() leaves it be). The next preview, its answer not kept, asks that worker: the same answer.
    A preview of other packages asks a worker of its own; one stopped before its worker answered stops it."""
    monkeypatch.setenv("PERFORMANCE_CACHE_DIR", str(short_folder))
    path, _ = worker_socket(PERF_PYTHON)
    assert path is not None and path.parent == short_folder / "workers"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(path))  # and closed without removing its file: a worker that was killed
    first = Prediction(PERF_PYTHON, idle_seconds=8)
    first.send([_row()])
    answer = first.answer()
    first.stop()
    assert first.answered_by == "new worker" and answer and answer["servers"]["m/v1"]["predictions"]
    running = worker_pid(path)
    assert running is not None
    kept = next(p for p in short_folder.iterdir() if (p / "answer.json").is_file())
    subprocess.run(["rm", "-rf", str(kept)], check=True)
    second = Prediction(PERF_PYTHON, idle_seconds=8)
    second.send([_row()])
    assert second.answered_by == "running worker" and second.answer() == answer
    assert json.loads((kept / "answer.json").read_text()) == answer and worker_pid(path) == running
    # Other packages in the virtualenv: another worker's socket, and its own worker.
    monkeypatch.setattr(performance_prediction, "_installed", lambda python: ["aiconfigurator-0.13.0.dist-info"])
    other = Prediction(PERF_PYTHON, idle_seconds=8)
    other.send([_row()])
    assert other.answered_by == "new worker" and worker_socket(PERF_PYTHON)[0] != path
    assert other._process is not None
    started = other._process.pid
    other.stop()
    assert _gone(started, within=10) and worker_pid(path) == running
    # Left alone, it leaves once idle.
    assert _gone(running, within=40) and not path.exists()


def test_the_idle_time_is_a_whole_number_of_seconds_within_the_workers_lifetime(monkeypatch):
    monkeypatch.delenv("PERFORMANCE_WORKER_IDLE_SECONDS")
    assert worker_idle_seconds() == 600
    monkeypatch.setenv("PERFORMANCE_WORKER_IDLE_SECONDS", "0")
    assert worker_idle_seconds() == 0
    for value in ("-5", "7201", "ten", "1e3"):
        monkeypatch.setenv("PERFORMANCE_WORKER_IDLE_SECONDS", value)
        with pytest.raises(StackConfigError, match=f"from 0 \\(no worker stays up\\) to 7200, not '{value}'"):
            worker_idle_seconds()


def test_a_bad_idle_time_stops_the_preview_with_exit_2(tmp_path):
    env = {**os.environ, "PERFORMANCE_WORKER_IDLE_SECONDS": "soon"}
    command = [str(ROOT / ".venv" / "bin" / "python"), "-m", "preview", "--quiet", "--stack", "dev", "--out", str(tmp_path)]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: PERFORMANCE_WORKER_IDLE_SECONDS: give a whole number of seconds from 0 (no worker stays up) to 7200, not 'soon'"
    )


def test_no_worker_listens_where_another_user_could_reach_it_or_its_address_does_not_fit(short_folder, monkeypatch):
    """The workers' folder must be this user's alone (another could answer in a worker's place); a socket's address
    holds 107 bytes. Each time, why: with the paths shortened as the report shortens them, and what to set."""
    monkeypatch.setenv("PERFORMANCE_CACHE_DIR", str(short_folder))
    workers = short_folder / "workers"
    workers.mkdir(mode=0o700)
    digest = performance_prediction._worker_digest(PERF_PYTHON)[:24]
    assert worker_socket(PERF_PYTHON) == (workers / f"{digest}.sock", None)
    workers.chmod(0o777)
    assert worker_socket(PERF_PYTHON) == (
        None,
        f"{shown_path(workers)} is writable by others than its owner (mode 0777, not 0700: chmod 700 it)",
    )
    workers.chmod(0o750)
    _, why = worker_socket(PERF_PYTHON)
    assert why == f"{shown_path(workers)} is readable by others than its owner (mode 0750, not 0700: chmod 700 it)"
    long = short_folder / ("x" * 80)
    monkeypatch.setenv("PERFORMANCE_CACHE_DIR", str(long))
    size = len(str(long)) + len(f"/workers/{digest}.sock")
    assert worker_socket(PERF_PYTHON) == (
        None,
        f"its socket, {shown_path(long / 'workers' / f'{digest}.sock')}, is {size} bytes in full, a socket's address holds "
        f"107: set PERFORMANCE_CACHE_DIR to a folder whose absolute path is at most {107 - len(f'/workers/{digest}.sock')} bytes",
    )
    assert not long.exists()
    # A folder given by the caller (the benchmark's): nothing to set.
    _, why = worker_socket(PERF_PYTHON, long)
    assert why is not None and why.endswith("a socket's address holds 107")


def test_a_relative_cache_folder_gives_the_worker_an_absolute_socket(short_folder, monkeypatch):
    """The worker binds its socket from the project's folder, the preview connects from its own: one path for both."""
    monkeypatch.chdir(short_folder)
    monkeypatch.setenv("PERFORMANCE_CACHE_DIR", "cache")
    path, why = worker_socket(PERF_PYTHON)
    assert why is None and path is not None and path.parent == short_folder / "cache" / "workers"


def _shape() -> dict:
    """A servingShapes row as the stage judges it: the worker's request row (`_row`) and what the report reads."""
    return {**_row(), "key": "inference-platform:models[0].versions[0]", "shape": "s", "replicas": {"max": 2}}


@pytest.mark.parametrize("cause", ["long", "open"])
def test_the_stage_says_why_no_worker_stays_up_when_one_would(short_folder, monkeypatch, cause):
    """A socket path too long for its address, or a workers' folder open to all (0777): the stage's data, its report.md
    and its console say why every preview pays the worker's start; with the idle time 0 (no worker would), nothing.
    The answer is kept, so no worker is started."""
    cache = short_folder / ("x" * 80) if cause == "long" else short_folder
    monkeypatch.setenv("PERFORMANCE_CACHE_DIR", str(cache))
    if cause == "open":
        (cache / "workers").mkdir(mode=0o700)
        (cache / "workers").chmod(0o777)
    asked = performance_prediction.request([_shape()])
    kept = cache / performance_prediction._cache_key(asked, PERF_PYTHON)
    kept.mkdir(parents=True)
    (kept / "answer.json").write_text(json.dumps({"servers": {}}))
    sections: dict[int, Section] = {}
    for idle in (600, 0):
        prediction = Prediction(PERF_PYTHON, idle_seconds=idle)
        prediction.send([_shape()])
        assert prediction.answered_by == "kept answer" and prediction._process is None
        section = performance_section([_shape()], prediction, "advisory")
        assert section is not None
        sections[idle] = section
    said = sections[600].data["noWorkerStaysUp"]
    expected = "PERFORMANCE_CACHE_DIR to a folder whose absolute path is at most" if cause == "long" else "writable by others"
    # The folder shown as the report shows paths (from the project), never the machine's absolute path.
    assert isinstance(said, str) and expected in said and shown_path(cache) in said, said
    assert not any(word.startswith("/") for word in said.split()), said
    line = f"No worker stays up for the next previews: {said}"
    assert sections[600].lines[-1] == line and line in sections[600].markdown.splitlines()
    assert sections[0].data["noWorkerStaysUp"] is None
    assert "No worker stays up" not in sections[0].markdown and not any("No worker" in x for x in sections[0].lines)
