"""Style, enforced: ruff's lint rules (pyflakes, syntax, the line limit, import order), ruff's
formatting and mypy over the project, as configured in pyproject.toml."""

from __future__ import annotations

import subprocess

from .helpers import ROOT

BIN = ROOT / ".venv" / "bin"


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True)


def test_ruff_lint_rules_pass():
    result = run(str(BIN / "ruff"), "check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_applied():
    result = run(str(BIN / "ruff"), "format", "--check", "--no-cache", ".")
    assert result.returncode == 0, "run `.venv/bin/ruff format .`:\n" + result.stdout + result.stderr


# mypy's cache, kept between runs in the git-ignored build/: a run checks again only the modules that changed and those
# that depend on them, with the same result as a whole run (mypy's incremental mode; it starts afresh when its version
# or options change).
MYPY_CACHE = ROOT / "build" / "mypy-cache"


def test_mypy_passes():
    result = run(str(BIN / "python"), "-m", "mypy", "--cache-dir", str(MYPY_CACHE))
    assert result.returncode == 0, result.stdout + result.stderr
