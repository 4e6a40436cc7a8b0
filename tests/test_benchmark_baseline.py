"""The benchmark's flat baseline (benchmarks/flat_program) registers the very same resources as
the program it is compared with: same URNs, types, parents and inputs, read back from the
program's resources.json and recorded again by the same mock engine."""

from __future__ import annotations

import pytest

from .helpers import ROOT


@pytest.fixture
def flat_evaluation(previews, monkeypatch):
    from preview.engine import evaluate
    from preview.render import resource_entries
    from preview.stack_config import load_project, load_stack_config

    def run(stack: str, custom_only: bool = False) -> tuple[list[dict], list[dict]]:
        recorded = previews[stack]
        assert recorded.result.returncode == 0, recorded.result.stderr
        monkeypatch.setenv("BENCH_RESOURCES", str(recorded.out / "resources.json"))
        monkeypatch.setenv("BENCH_CUSTOM_ONLY", "1" if custom_only else "0")
        config = load_stack_config(load_project(ROOT), stack)
        flat = evaluate(ROOT / "benchmarks" / "flat_program", config)
        return recorded.resources, resource_entries(flat.resources)

    return run


@pytest.mark.parametrize("stack", ["prod", "dev"])
def test_flat_baseline_registers_the_very_same_resources(flat_evaluation, stack):
    program, flat = flat_evaluation(stack)
    assert len(flat) == len(program)
    assert flat == program


def test_custom_only_baseline_registers_the_custom_resources(flat_evaluation):
    program, flat = flat_evaluation("prod", custom_only=True)
    wanted = {(r["type"], r["name"]) for r in program if r["custom"] and not r["type"].startswith("pulumi:providers:")}
    assert {(r["type"], r["name"]) for r in flat if r["custom"]} == wanted
    assert not [r for r in flat if not r["custom"] and r["type"] != "pulumi:pulumi:Stack"]


@pytest.mark.parametrize(
    ("flag", "value", "most"), [("--prod-repeat", "0", 100), ("--sizes", "-3", 2000), ("--repeat", "x", 100)]
)
def test_the_benchmark_refuses_a_count_it_cannot_run_with_exit_2(flag, value, most):
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_preview.py"), flag, value],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert f"argument {flag}: give a whole number from 1 to {most}, not {value!r}" in result.stderr
    assert "Traceback" not in result.stderr
