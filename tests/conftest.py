"""Shared fixtures (each stack file's project config as a fresh mapping, each stack's preview) and the run's
hooks: skips CI forbids, the early MLflow server, pytest-xdist's workers."""

from __future__ import annotations

import copy
import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .helpers import raw_stack

if TYPE_CHECKING:
    from .helpers import PreviewRun
    from .servers.mlflow import MlflowServer


# The previews the suite runs start no Serving performance worker that stays up after them
# (preview/performance_prediction.py); the tests of that mode set their own idle time.
os.environ["PERFORMANCE_WORKER_IDLE_SECONDS"] = "0"


@pytest.fixture
def dev_raw() -> dict[str, Any]:
    return copy.deepcopy(raw_stack("dev"))


@pytest.fixture
def staging_raw() -> dict[str, Any]:
    return copy.deepcopy(raw_stack("staging"))


@pytest.fixture
def prod_raw() -> dict[str, Any]:
    return copy.deepcopy(raw_stack("prod"))


@pytest.fixture(scope="session")
def previews(tmp_path_factory) -> dict[str, "PreviewRun"]:
    """Each stack previewed once per run, as a user runs it (`python -m preview`): the three at
    once, and under pytest-xdist by the first worker that asks, into the run's shared temporary
    folder, for every worker."""
    folder = tmp_path_factory.getbasetemp()
    if XDIST_WORKER in os.environ:
        folder = folder.parent  # the run's folder; each worker's is a folder in it
    with exclusive(folder / "previews.lock"):
        return previewed_stacks(folder / "previews")


XDIST_WORKER = "PYTEST_XDIST_WORKER"


@contextmanager
def exclusive(lock: Path) -> Iterator[None]:
    """Held by one process of the run at a time (pytest-xdist's workers)."""
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def previewed_stacks(folder: Path) -> dict[str, "PreviewRun"]:
    """Every stack previewed into `folder/<stack>`, or read back from there when a process of
    this run did so already (`runs.json`: each preview's exit code and output)."""
    from .helpers import STACKS, PreviewRun, run_preview

    runs_file = folder / "runs.json"
    if not runs_file.exists():
        folder.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(len(STACKS)) as pool:
            done = dict(zip(STACKS, pool.map(lambda s: run_preview("--stack", s, "--out", str(folder / s)), STACKS)))
        runs_file.write_text(json.dumps({s: [r.args, r.returncode, r.stdout, r.stderr] for s, r in done.items()}))
    return {
        stack: PreviewRun(stack=stack, out=folder / stack, result=subprocess.CompletedProcess(*run))
        for stack, run in json.loads(runs_file.read_text()).items()
    }


def pytest_sessionstart(session) -> None:
    from preview.schemas import crd_schema_dir
    from preview.upstream import facts_dir

    facts = facts_dir()
    if not (facts / "charts").is_dir() or not (facts / "vllm").is_dir():
        raise pytest.UsageError(
            f"the upstream facts are not at {facts}: set UPSTREAM_FACTS_DIR to the shared upstream-facts folder "
            "(charts/ and vllm/, read in place)"
        )
    directory = crd_schema_dir()
    if not (directory / "serving.knative.dev").is_dir():
        raise pytest.UsageError(
            f"the upstream CRD schemas are not at {directory}: set CRD_SCHEMA_DIR to the shared crd-schemas folder "
            "(or a checkout of datreeio/CRDs-catalog)"
        )


# Where PYTHONDONTWRITEBYTECODE is set (see the Makefile's `bytecode`), pytest would rewrite the
# asserts of every test module again in each process: seconds in this run, in each pytest-xdist
# worker and in each run tests/test_ci.py starts. While collecting, it may cache them
# (__pycache__, git-ignored); a stale cache is ignored.
@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    writes = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = writes


# `.ci/run` sets this: there, a test that needs a real server (MLflow, Prometheus) or aiconfigurator and was
# skipped because the server could not be installed or started, or that reads a pinned upstream
# source release (`make upstream-sources`) and was skipped because it is not there, fails the run
# instead.
REQUIRE_REAL_SERVERS = "REQUIRE_REAL_SERVERS"
NEVER_SKIPPED_IN_CI = ("real_server", "upstream_source", "performance_database")
# The only tests CI lets skip, each with why it cannot run on a CI machine (none today: the tests of
# what needs the Pulumi CLI, a cluster or AWS would go here, named by node id). Any other skip fails
# `.ci/run`, and the list is printed at the end of every run that enforces it.
SKIPS_ALLOWED_IN_CI: dict[str, str] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or os.environ.get(REQUIRE_REAL_SERVERS) != "1" or item.nodeid in SKIPS_ALLOWED_IN_CI:
        return
    if hasattr(report, "wasxfail"):
        return  # an expected failure, reported as skipped: not a skip
    marker = next((m for m in NEVER_SKIPPED_IN_CI if item.get_closest_marker(m)), None)
    reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    if marker is not None:
        report.longrepr = f"{item.nodeid}: skipped, but {REQUIRE_REAL_SERVERS}=1 forbids skipping {marker} tests: {reason}"
    else:
        report.longrepr = f"{item.nodeid}: skipped, and not in tests/conftest.py SKIPS_ALLOWED_IN_CI: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A whole module skipped while it is collected (`pytest.importorskip`, a module-level skip) is held to the
    same rule: under `.ci/run` it fails unless SKIPS_ALLOWED_IN_CI names it."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get(REQUIRE_REAL_SERVERS) == "1" and collector.nodeid not in SKIPS_ALLOWED_IN_CI:
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"{collector.nodeid}: skipped while collected, and not in SKIPS_ALLOWED_IN_CI: {reason}"


def pytest_terminal_summary(terminalreporter) -> None:
    if os.environ.get(REQUIRE_REAL_SERVERS) == "1":
        allowed = "; ".join(f"{node}: {why}" for node, why in SKIPS_ALLOWED_IN_CI.items()) or "none"
        terminalreporter.write_line(f"skips allowed in CI (tests/conftest.py SKIPS_ALLOWED_IN_CI): {allowed}")


# The MLflow server takes seconds to import and migrate its store: spawned as soon as collection
# finds the registry tests, it comes up while the tests before them run. Under pytest-xdist the
# controller spawns it, once, when a worker's collection has them (each worker collects every
# test, and which one runs the registry tests is decided later), into a folder it names to the
# workers beforehand; it outlives the workers and stops it at the end.
EARLY_MLFLOW = pytest.StashKey["MlflowServer"]()
EARLY_MLFLOW_FOLDER = pytest.StashKey[str]()  # the controller's, named to each worker in its workerinput
WORKERINPUT_MLFLOW_FOLDER = "early_mlflow_folder"


def has_registry_tests(node_ids: Iterable[str]) -> bool:
    return any(node_id.split("::", 1)[0].endswith("test_registry.py") for node_id in node_ids)


def pytest_collection_finish(session) -> None:
    from .servers.mlflow import missing_reason, spawn_mlflow

    if hasattr(session.config, "workerinput"):
        return  # a pytest-xdist worker: the controller spawns it
    if has_registry_tests(item.nodeid for item in session.items) and missing_reason() is None:
        import tempfile

        session.config.stash[EARLY_MLFLOW] = spawn_mlflow(Path(tempfile.mkdtemp(prefix="mlflow-")))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """pytest-xdist's controller, before starting a worker: where the early server will be."""
    if EARLY_MLFLOW_FOLDER not in node.config.stash:
        import tempfile

        node.config.stash[EARLY_MLFLOW_FOLDER] = tempfile.mkdtemp(prefix="mlflow-")
    node.workerinput[WORKERINPUT_MLFLOW_FOLDER] = node.config.stash[EARLY_MLFLOW_FOLDER]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids) -> None:
    from .servers.mlflow import missing_reason, spawn_mlflow

    config = node.config
    if EARLY_MLFLOW in config.stash or not has_registry_tests(ids) or missing_reason() is not None:
        return
    server = spawn_mlflow(Path(config.stash[EARLY_MLFLOW_FOLDER]))
    config.stash[EARLY_MLFLOW] = server
    (server.folder / "uri").write_text(server.uri)


def early_mlflow(config) -> "MlflowServer | None":
    """The server the suite spawned early, if it did: this process's, or under pytest-xdist the
    controller's (not this worker's to stop)."""
    from .servers.mlflow import MlflowServer

    server = config.stash.get(EARLY_MLFLOW, None)
    if server is None and hasattr(config, "workerinput"):
        folder = Path(config.workerinput[WORKERINPUT_MLFLOW_FOLDER])
        if (folder / "uri").is_file():
            try:  # the first worker to ask registers models in it; another starts its own
                os.close(os.open(folder / "claimed", os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return None
            server = MlflowServer((folder / "uri").read_text(), folder, process=None)
    return server


def pytest_sessionfinish(session) -> None:
    server = session.config.stash.get(EARLY_MLFLOW, None)
    if server is not None:
        server.stop()  # a no-op when the registry tests stopped it already
    elif EARLY_MLFLOW_FOLDER in session.config.stash:
        os.rmdir(session.config.stash[EARLY_MLFLOW_FOLDER])  # named to the workers, never used


@pytest.fixture(scope="session")
def promtool() -> str:
    """The real promtool (Debian's `prometheus` package; `make real-servers` installs it)."""
    import shutil

    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not on PATH (Debian package `prometheus`; `make real-servers` installs it)")
    return path
