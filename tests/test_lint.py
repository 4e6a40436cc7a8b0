"""Static checks: no undefined names, unused imports or syntax errors anywhere in the project."""

import subprocess

from .helpers import ROOT

CHECKED = ["__main__.py", "components", "platform_config", "preview", "policies/__main__.py", "policies/inference_governance", "tests", "benchmarks"]


def test_ruff_pyflakes_rules_pass():
    result = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "ruff"), "check", "--select", "F,E9", "--no-cache", *CHECKED], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
