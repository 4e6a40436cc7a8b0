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


EVALUATING = "evaluating the program under the mock engine (the policy pack analyzing alongside)"


def test_the_benchmark_runs_at_a_small_size(tmp_path):
    """`make bench` as committed runs (so it cannot rot): a committed stack and the smallest generated stack,
    once each, print their tables against the floor, the stages' shares and the CPU each stage and the pack take."""
    import json
    import subprocess
    import sys

    command = [sys.executable, str(ROOT / "benchmarks" / "bench_preview.py"), "--sizes", "10", "--repeat", "1"]
    result = subprocess.run(
        [*command, "--prod-repeat", "1", "--stacks", "dev"], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "| stack | resources | whole preview | floor: a process registering the same resources | ratio |" in out
    figures = json.loads(out[out.index("\n{") :])
    (dev,) = figures["stacks"]
    (size,) = figures["sizes"]
    assert dev["stack"] == "dev" and size["models"] == 10
    for row in (dev, size):
        # Both timed, not compared: under load a one-shot floor can take longer than a one-shot preview.
        assert row["floorSeconds"] > 0 and row["previewSeconds"] > 0
        assert row["previewPeakMiB"] > 0 and row["resources"] > 50
        # The processes together hold more than the preview's alone (the pack and its client run beside it).
        assert row["previewTreePeakMiB"] > row["previewPeakMiB"]
        # ... the preview, the pack and its client each a part of it, at the moment of the peak.
        parts = row["previewTreePeakParts"]
        assert {"preview", "pack", "client"} <= set(parts) and all(mib > 0 for mib in parts.values())
        assert abs(sum(parts.values()) - row["previewTreePeakMiB"]) < 1
        assert f"{row['stack']}: all its processes at their peak, by process: client " in out
        assert f"| {row['stack']} | {row['resources']} |" in out
        # The CPU of the preview's processes together, the pack's part of it, and each stage's in the preview's own.
        assert 0 < row["packCpuSeconds"] < row["previewCpuSeconds"] and 0 < row["packCpuShare"] < 1
        assert 0 < row["stageCpuSeconds"][EVALUATING] < row["previewCpuSeconds"]
        (line,) = [line for line in out.splitlines() if line.startswith(f"{row['stack']} CPU by stage: ")]
        assert EVALUATING in line
    assert size["previewSecondsDecodeEach"] > 0
    assert "prod stack, the Serving performance stage (interleaved)" in out
    # The fourth mode: a worker started before the rounds, asked by each round's preview (the bench refuses a round
    # that another answered), its CPU time counted with the preview's; it is stopped at the end.
    assert "aiconfigurator asked through a worker already running (servers changed since it started)" in out
    assert sorted(figures["prod"]) == ["bare", "cold", "decode each", "read back", "warm"]
    assert all(mode["cpuSeconds"] > 0 and mode["seconds"] > 0 for mode in figures["prod"].values())
