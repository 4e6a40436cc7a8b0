"""How the config error tests (tests/test_config_validation.py, tests/test_config_secrets_and_bounds.py) take a bad
stack's answer: its one problem, or the preview's refusal as a user sees it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .helpers import config_problems, run_preview


def preview_refuses(stack: Path, out: Path) -> str:
    """Preview a bad stack file as a user does: exit 2, no traceback, nothing written; its stderr."""
    result = run_preview("--stack", "test", "--config-file", str(stack), "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()
    return result.stderr


def only_issue(raw: dict[str, Any]) -> str:
    found = config_problems(raw)
    assert len(found) == 1, found
    return found[0]
