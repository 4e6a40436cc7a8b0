"""A real MLflow tracking server on loopback for the registry tests, and MLflow's own client to register models in it.

MLflow lives in a virtualenv of its own (`make .venv-mlflow/.installed`; elsewhere set MLFLOW_BIN_DIR to the folder
holding its `mlflow` and `python`): the program under test talks plain REST and has no MLflow. The server keeps its
registry in SQLite and its artifacts in a temporary folder, and is killed when the tests are done.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MLFLOW_BIN_DIR = "MLFLOW_BIN_DIR"
# The server needs about ten seconds to come up on an idle machine, half a minute or more on a busy one; two minutes
# is a broken install.
START_DEADLINE_SECONDS = 120


def mlflow_bin_dir() -> Path:
    return Path(os.environ.get(MLFLOW_BIN_DIR) or ROOT / ".venv-mlflow" / "bin")


def missing_reason() -> str | None:
    """Why no server can start here (for a skip), or None."""
    folder = mlflow_bin_dir()
    for program in ("mlflow", "python"):
        if not os.access(folder / program, os.X_OK):
            return f"no MLflow at {folder}: run `make .venv-mlflow/.installed` or set {MLFLOW_BIN_DIR}"
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# Run by the MLflow virtualenv's python: each operation in order, with MLflow's own client; prints each one's result.
_CLIENT_SCRIPT = """
import json, sys
import mlflow
client = mlflow.MlflowClient(sys.argv[1])
results = []
for op, *args in json.loads(sys.argv[2]):
    if op == "model":
        client.create_registered_model(args[0])
        results.append(args[0])
    elif op == "version":
        name, source, tags, with_run = args
        run_id = None
        if with_run:  # MLflow accepts a runs:/ source only with the run it names
            experiment = client.get_experiment_by_name("registry-tests") or client.get_experiment(
                client.create_experiment("registry-tests"))
            run_id = client.create_run(experiment.experiment_id).info.run_id
            source = source.replace("{run_id}", run_id)
        # The server registers it READY at once: no polling for it.
        version = client.create_model_version(name, source=source, tags=tags, run_id=run_id, await_creation_for=0)
        results.append(version.version)
    elif op == "alias":
        client.set_registered_model_alias(*args)
        results.append(args[2])
    elif op == "aliases":  # every alias of the registered model, as MLflow's client reads them
        results.append(client.get_registered_model(args[0]).aliases)
print(json.dumps(results))
"""


@dataclass
class MlflowServer:
    uri: str
    folder: Path
    # None: started by another process of the run (pytest-xdist's controller, tests/conftest.py), which stops it.
    process: subprocess.Popen[bytes] | None

    @property
    def database(self) -> Path:
        return self.folder / "db.sqlite"

    def client(self, *operations: list[Any]) -> list[str]:
        """Run operations with MLflow's client: ["model", name], ["version", name, source, tags, with_run] (a
        `{run_id}` in the source becomes a new run's id), ["alias", name, alias, version], ["aliases", name] (its
        aliases: {alias: version}). Their results (versions)."""
        done = subprocess.run(
            [str(mlflow_bin_dir() / "python"), "-c", _CLIENT_SCRIPT, self.uri, json.dumps(operations)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"the MLflow client failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    def stop(self) -> None:
        """Stop the server and the workers it forked (its own process group, started here)."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=15)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            pass
        try:  # whatever of the group outlived the server
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=15)


def start_mlflow(folder: Path) -> MlflowServer:
    """A tracking server on a free loopback port, healthy; RuntimeError with its log when it does not come up."""
    return wait_until_healthy(spawn_mlflow(folder))


def spawn_mlflow(folder: Path) -> MlflowServer:
    """A tracking server starting on a free loopback port (it needs seconds to come up: the suite
    spawns it when collection finds the registry tests, and they wait for it when they begin)."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = (folder / "server.log").open("wb")
    process = subprocess.Popen(
        [
            str(mlflow_bin_dir() / "mlflow"),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            f"sqlite:///{folder / 'db.sqlite'}",
            "--artifacts-destination",
            str(folder / "artifacts"),
            "--workers",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        # Without the job runner and its Huey consumers (some ten processes that import MLflow and poll, for
        # GenAI jobs the registry never runs): MLFLOW_SERVER_ENABLE_JOB_EXECUTION, mlflow 3.17.2
        # mlflow/environment_variables.py, read by `mlflow server` in mlflow/server/__init__.py.
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        # Its own process group: stopping it stops the workers it forks.
        start_new_session=True,
    )
    return MlflowServer(f"http://127.0.0.1:{port}", folder, process)


def wait_until_healthy(server: MlflowServer) -> MlflowServer:
    """The server once its /health answers; RuntimeError with its log when it does not come up."""
    process, folder = server.process, server.folder
    deadline = time.monotonic() + START_DEADLINE_SECONDS
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"{server.uri}/health", timeout=2) as answer:
                if answer.status == 200:
                    return server
        except OSError:
            time.sleep(0.3)
    server.stop()
    raise RuntimeError(
        f"MLflow did not come up within {START_DEADLINE_SECONDS} s:\n{(folder / 'server.log').read_text()[-3000:]}"
    )
