"""Rules under the real `promtool` for the rule tests (tests/test_slo_rules.py and the modules beside it, the batch
and GPU memory rules' tests): `promtool test rules` run on a rules file and its verdict read, the rules'
annotations left out where a test checks only when alerts fire, and labels as promtool writes them."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml


def run_tests(promtool: str, tmp_path: Path, rules: Path, tests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    spec = tmp_path / "tests.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": "1m", "tests": tests}, sort_keys=False))
    return subprocess.run([promtool, "test", "rules", str(spec)], capture_output=True, text=True, timeout=120, cwd=tmp_path)


def passes(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stdout + result.stderr


def fails(result: subprocess.CompletedProcess[str]) -> None:
    """promtool ran the test and found the alerts other than expected (not a broken test file)."""
    output = result.stdout + result.stderr
    assert result.returncode == 1 and "exp:" in output and "got:" in output, output


def prom_labels(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def strip_annotations(rules: Path) -> None:
    """Leave the alerts' annotations out where a test checks when they fire, not what they say
    (promtool compares annotations whole; the latency test checks them)."""
    data = yaml.safe_load(rules.read_text())
    for group in data["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    rules.write_text(yaml.safe_dump(data, sort_keys=False))
