"""aiconfigurator's answer for the program's `servingShapes`: the request the Serving performance stage sends its
worker (`preview/performance_worker.py`, in `.venv-perf`), and the answers kept per request (read back when the same
servers were asked before, with no worker started); the latency plot (`preview/performance_plot.py`), and the
install's warm-up of the worker (`python -m preview.performance_prediction --warm`)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from platform_config.gpu_catalog import GPU_MODELS

from .report import PROJECT_ROOT, shown_paths

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
def cache_dir() -> Path:
    """build/performance-cache, or PERFORMANCE_CACHE_DIR (the bench's cold runs give a fresh one)."""
    return Path(os.environ.get("PERFORMANCE_CACHE_DIR") or PROJECT_ROOT / "build" / "performance-cache")


def _installed(python: Path) -> list[str]:
    """What the virtualenv holds, by its distributions' dist-info folders (Python version, name and version each):
    where it is does not matter, so two checkouts with the same packages (a pull request's and its default
    branch's, in CI) share their answers. An interpreter outside a virtualenv (PERFORMANCE_PYTHON) shows no such
    folders there: it is named by its own path instead, so at least two interpreters never share an answer."""
    venv = python.parent.parent
    held = sorted(str(p.relative_to(venv)) for p in venv.glob("lib/python*/site-packages/*.dist-info"))
    return held or [str(python.resolve())]


def _cache_key(asked: dict[str, Any], python: Path) -> str:
    """The request with the worker, the pinned packages and what the virtualenv holds: any change is a new key."""
    digest = hashlib.sha256(json.dumps(asked, sort_keys=True).encode())
    for source in (Path(__file__).with_name("performance_worker.py"), Path(__file__).with_name("performance-requirements.txt")):
        digest.update(source.read_bytes())
    digest.update(json.dumps(_installed(python)).encode())
    return digest.hexdigest()[:32]


def _read_answer(path: Path) -> dict[str, Any] | None:
    """A kept answer, or None where there is none or it cannot be read (a run stopped while writing it)."""
    try:
        answer = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return answer if isinstance(answer, dict) and isinstance(answer.get("servers"), dict) else None


def _write_request(stdin: IO[str], text: str) -> None:
    try:
        stdin.write(text)
        stdin.close()
    except (OSError, ValueError):
        pass  # it failed, or was stopped, on its own; answer() says how


@dataclass
class Prediction:
    """aiconfigurator's answer for the program's `servingShapes`: read back from the cache when the same request was
    answered before, else from the worker, started and sent the request when the program exports the shapes (its
    first export, before it registers a resource) and waited for by `answer()` after the other stages."""

    python: Path | None
    problem: str | None = None
    cached: bool = False
    _process: subprocess.Popen[str] | None = field(default=None, init=False)
    _asked: dict[str, Any] | None = field(default=None, init=False)
    _answer: dict[str, Any] | None = field(default=None, init=False)
    _folder: Path | None = field(default=None, init=False)

    @classmethod
    def of_perf_venv(cls) -> Prediction:
        """The stage's prediction, its worker not started yet: a preview whose servers were asked before reads their
        answer back and starts none (importing the package alone takes about a CPU-second the program and the pack
        would otherwise share their two cores with)."""
        python = performance_python()
        if not python.exists():
            return cls(None, problem=f"not run: {python.name} of .venv-perf is missing (`make perf-venv` installs it)")
        return cls(python)

    def _start(self) -> subprocess.Popen[str] | None:
        """The worker, reading its request from stdin; None (the problem said) where the interpreter cannot start."""
        assert self.python is not None
        try:
            return subprocess.Popen(
                [str(self.python), "-m", "preview.performance_worker"],
                cwd=PROJECT_ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        except OSError as error:
            self.problem = f"not run: {shown_paths(str(self.python))} does not start: {error.strerror or error}"
            return None

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
        kept = _read_answer(self._folder / "answer.json")
        if kept is not None:
            self._answer = kept
            self.cached = True
            return
        self._process = self._start()
        if self._process is None:
            return
        assert self._process.stdin is not None
        # Written from a thread: the worker reads its request only once it has imported the package, and a request
        # larger than the pipe holds (hundreds of servers) would otherwise stop the program until then, or for good
        # if the worker's own output filled its pipes meanwhile; answer() reads those.
        stdin, self._process.stdin = self._process.stdin, None
        threading.Thread(target=_write_request, args=(stdin, json.dumps(asked)), daemon=True).start()

    def on_export(self, output: str) -> Callable[[str, Any], None]:
        """Told of each stack output as the program exports it (preview/engine.py evaluate): the servers are sent as the
        program exports `output`, so aiconfigurator predicts while the program's registrations drain and the other
        stages run."""

        def exported(name: str, value: Any) -> None:
            if name == output and isinstance(value, dict):
                self.send(value.get("servers"))

        return exported

    def stop(self) -> None:
        """For a run that stops before it reads the answer, or needs none: no worker outlives the preview."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.communicate()
        self._process = None

    def answer(self) -> dict[str, Any] | None:
        if self._answer is None and self._process is not None:
            try:
                stdout, stderr = self._process.communicate(timeout=WORKER_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self.stop()
                self.problem = f"aiconfigurator did not answer within {WORKER_TIMEOUT_SECONDS} s"
                return None
            if self._process.returncode != 0:
                self.problem = f"aiconfigurator failed: {shown_paths((stderr.strip().splitlines() or ['no output'])[-1][:300])}"
                return None
            self._answer = json.loads(stdout)
            assert self._folder is not None
            # Whole or not at all: a preview stopped mid-write leaves no half answer for the next to read.
            self._folder.mkdir(parents=True, exist_ok=True)
            partial = self._folder / f"answer.json.{os.getpid()}"
            partial.write_text(json.dumps(self._answer))
            os.replace(partial, self._folder / "answer.json")
        return self._answer


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
