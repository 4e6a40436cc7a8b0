"""Shared fixtures: each stack file's project config as a fresh mapping."""

from __future__ import annotations

import copy
import os
from typing import TYPE_CHECKING, Any

import pytest

from .helpers import raw_stack

if TYPE_CHECKING:
    from .helpers import PreviewRun


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
    """Each stack previewed once per session, as a user runs it (`python -m preview`)."""
    from .helpers import STACKS, PreviewRun, run_preview

    runs = {}
    for stack in STACKS:
        out = tmp_path_factory.mktemp(f"preview-{stack}")
        result = run_preview("--stack", stack, "--out", str(out))
        runs[stack] = PreviewRun(stack=stack, out=out, result=result)
    return runs


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


# `.ci/run` sets this: there, a test that needs a real server (MLflow, Prometheus) and was
# skipped because the server could not be installed or started, or that reads a pinned upstream
# source release (`make upstream-sources`) and was skipped because it is not there, fails the run
# instead.
REQUIRE_REAL_SERVERS = "REQUIRE_REAL_SERVERS"
NEVER_SKIPPED_IN_CI = ("real_server", "upstream_source")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or os.environ.get(REQUIRE_REAL_SERVERS) != "1":
        return
    marker = next((m for m in NEVER_SKIPPED_IN_CI if item.get_closest_marker(m)), None)
    if marker is not None:
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid}: skipped, but {REQUIRE_REAL_SERVERS}=1 forbids skipping {marker} tests: {reason}"


# The MLflow server takes seconds to import and migrate its store: spawned as soon as collection
# finds the registry tests, it comes up while the tests before them run.
EARLY_MLFLOW = pytest.StashKey["object"]()


def pytest_collection_finish(session) -> None:
    from .servers.mlflow import missing_reason, spawn_mlflow

    if any(item.path.name == "test_registry.py" for item in session.items) and missing_reason() is None:
        import tempfile
        from pathlib import Path

        session.config.stash[EARLY_MLFLOW] = spawn_mlflow(Path(tempfile.mkdtemp(prefix="mlflow-")))


def pytest_sessionfinish(session) -> None:
    server = session.config.stash.get(EARLY_MLFLOW, None)
    if server is not None:
        server.stop()  # a no-op when the registry tests stopped it already


@pytest.fixture(scope="session")
def promtool() -> str:
    """The real promtool (Debian's `prometheus` package; `make real-servers` installs it)."""
    import shutil

    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not on PATH (Debian package `prometheus`; `make real-servers` installs it)")
    return path
