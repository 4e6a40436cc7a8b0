"""What the Serving performance stage's tests share (tests/test_serving_performance.py and
tests/test_serving_performance_worker.py): the performance virtualenv's interpreter, the mark of a test that runs
aiconfigurator, the package asked directly, and the stage's servers in a report."""

from __future__ import annotations

import json
import subprocess

import pytest

from .helpers import ROOT

PERF_PYTHON = ROOT / ".venv-perf" / "bin" / "python"


def needs_database(test):
    """A test that runs aiconfigurator: skipped without .venv-perf, which `.ci/run` turns into a failure."""
    skip = pytest.mark.skipif(not PERF_PYTHON.exists(), reason="no .venv-perf: `make perf-venv` installs aiconfigurator")
    return pytest.mark.performance_database(skip(test))


def package(code: str) -> object:
    """What the installed package answers to `code` (which prints one JSON value), called directly."""
    script = "import json, logging, contextlib, io\nlogging.disable(logging.WARNING)\n" + code
    result = subprocess.run([str(PERF_PYTHON), "-c", script], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def performance(report: dict) -> dict[str, dict]:
    return {s["server"]: s for s in report["performance"]["data"]["servers"]}
