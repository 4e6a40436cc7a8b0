"""Benchmark the offline preview (not a test: figures go into the README).

For generated stacks of N models x M tenants it reports the wall time of a whole preview and of
the program-evaluation stage, the evaluation of a flat baseline program registering the very same
resources with the very same inputs (read back from resources.json) under the same mock engine,
and memory per resource. Two baselines: every recorded resource (components as bare component
registrations, with their parents: the same URNs), and the custom resources alone. It also times
the whole preview of the prod stack, as a user runs it.

    .venv/bin/python benchmarks/bench_preview.py [--sizes 10 100 500] [--repeat N] [--prod-repeat 10]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.generate import generate_stack  # noqa: E402

PY = sys.executable


def run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})})
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{result.stdout}\n{result.stderr}")
    return elapsed, result


def measure(program: Path, stack_file: Path, env: dict[str, str] | None = None) -> dict:
    _, result = run(
        [PY, str(ROOT / "benchmarks" / "measure.py"), "--program", str(program), "--config-file", str(stack_file)], env
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def preview(stack_args: list[str], out: Path, env: dict[str, str] | None = None) -> tuple[float, dict]:
    elapsed, result = run([PY, "-m", "preview", *stack_args, "--out", str(out), "--json"], env)
    return elapsed, json.loads(result.stdout)


# The policy SDK's own decoding, once per policy (policies/inference_governance/decoding.py).
DECODE_EACH = {"POLICY_PACK_DECODE_EACH": "1"}
# A preview whose Serving performance stage finds no aiconfigurator (it reports "not run" and predicts nothing).
WITHOUT_PERFORMANCE = {"PERFORMANCE_PYTHON": "/nonexistent/python"}
PACK_WAIT = "waiting for the policy pack's verdict (analyzer protocol)"


def median(values: list[float]) -> float:
    return statistics.median(values)


def _count(most: int) -> Callable[[str], int]:
    """A whole number from 1 to `most`, else argparse's usage error (exit 2) naming the flag."""

    def parse(text: str) -> int:
        if not text.isdigit() or not 1 <= int(text) <= most:
            raise argparse.ArgumentTypeError(f"give a whole number from 1 to {most}, not {text!r}")
        return int(text)

    return parse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=_count(2000), nargs="+", default=[10, 100, 500], help="models per stack")
    parser.add_argument("--repeat", type=_count(100), help="runs per size (default: 5 up to 100 models, 3 above)")
    parser.add_argument("--prod-repeat", type=_count(100), default=10)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        rows = [bench_size(tmpdir, models, args.repeat or (5 if models <= 100 else 3)) for models in args.sizes]
        prod_walls, prod_report = bench_prod(tmpdir, args.prod_repeat)

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print_prod(prod_walls, prod_report, args.prod_repeat)
    print()
    print_pack_table(rows)
    print()
    print_evaluation_table(rows)
    print()
    print(json.dumps(rows, indent=2))


def bench_size(tmpdir: Path, models: int, repeat: int) -> dict:
    """A generated stack of `models` models (a tenant to every 10, at least 2): its whole preview, with the pack
    decoding once per request and once per policy, and its evaluation against the two flat baselines."""
    tenants = max(2, models // 10)
    stack_file = tmpdir / f"Pulumi.bench-{models}.yaml"
    config = {f"inference-platform:{k}": v for k, v in generate_stack(models, tenants).items()}
    config["aws:region"] = "us-east-1"
    stack_file.write_text(yaml.safe_dump({"config": config}))
    out = tmpdir / f"out-{models}"
    walls, stages, each_walls, each_waits = [], [], [], []
    for _ in range(repeat):
        wall, report = preview(["--stack", "bench", "--config-file", str(stack_file)], out)
        walls.append(wall)
        stages.append({s["name"]: s["seconds"] for s in report["stages"]})
        # Interleaved: the same preview with the pack decoding each resource once per policy.
        wall, report = preview(["--stack", "bench", "--config-file", str(stack_file)], out, DECODE_EACH)
        each_walls.append(wall)
        each_waits.append(next(s["seconds"] for s in report["stages"] if s["name"] == PACK_WAIT))
    env = {"BENCH_RESOURCES": str(out / "resources.json")}
    custom_only = {**env, "BENCH_CUSTOM_ONLY": "1"}
    # Interleaved, so a slow spell of the machine hits the program and its baselines alike.
    program, flat, flat_custom = [], [], []
    for _ in range(repeat):
        program.append(measure(ROOT, stack_file))
        flat.append(measure(ROOT / "benchmarks" / "flat_program", stack_file, env))
        flat_custom.append(measure(ROOT / "benchmarks" / "flat_program", stack_file, custom_only))
    resources = program[0]["resources"]
    return {
        "models": models,
        "tenants": tenants,
        "resources": resources,
        "custom": program[0]["custom"],
        "previewSeconds": median(walls),
        "previewSecondsDecodeEach": median(each_walls),
        "packWaitSecondsDecodeEach": median(each_waits),
        "stageSeconds": {k: median([s[k] for s in stages]) for k in stages[0]},
        "evalSeconds": median([p["seconds"] for p in program]),
        "flatSeconds": median([f["seconds"] for f in flat]),
        "flatResources": flat[0]["resources"],
        "flatCustomOnlySeconds": median([f["seconds"] for f in flat_custom]),
        "flatCustomOnlyResources": flat_custom[0]["resources"],
        "evalGrowthKiBPerResource": median([p["growthKiB"] for p in program]) / resources,
        "flatGrowthKiBPerResource": median([f["growthKiB"] for f in flat]) / max(flat[0]["resources"], 1),
        "peakMiB": max(p["peakKiB"] for p in program) / 1024,
    }


def bench_prod(tmpdir: Path, repeat: int) -> tuple[dict[str, list[float]], dict]:
    """The prod stack's whole preview as a user runs it, interleaved with the same preview with the pack decoding once
    per policy, without the Serving performance stage, and with it cold; the last run's report."""
    walls: dict[str, list[float]] = {"read back": [], "decode each": [], "bare": [], "cold": []}
    for _ in range(repeat):
        wall, report = preview(["--stack", "prod"], tmpdir / "prod")
        walls["read back"].append(wall)
        wall, _ = preview(["--stack", "prod"], tmpdir / "prod-each", DECODE_EACH)
        walls["decode each"].append(wall)
        # Interleaved too: the same preview without the Serving performance stage (no aiconfigurator to run), and
        # with it cold (an empty cache: aiconfigurator runs); the first runs above read its answer back.
        wall, _ = preview(["--stack", "prod"], tmpdir / "prod-bare", WITHOUT_PERFORMANCE)
        walls["bare"].append(wall)
        empty_cache = {"PERFORMANCE_CACHE_DIR": tempfile.mkdtemp(dir=tmpdir)}
        wall, _ = preview(["--stack", "prod"], tmpdir / "prod-cold", empty_cache)
        walls["cold"].append(wall)
    return walls, report


def print_prod(walls: dict[str, list[float]], prod_report: dict, repeat: int) -> None:
    prod_walls, prod_each_walls = walls["read back"], walls["decode each"]
    prod_bare_walls, prod_cold_walls = walls["bare"], walls["cold"]
    print(
        f"prod stack: whole offline preview median {median(prod_walls):.2f} s, min {min(prod_walls):.2f} s, max "
        f"{max(prod_walls):.2f} s "
        f"({repeat} runs), {prod_report['counts']['resources']} resources, stages of the last run: "
        + ", ".join(f"{s['name']} {s['seconds']:.2f} s" for s in prod_report["stages"])
    )
    print(
        f"prod stack, the pack decoding once per request against once per policy (interleaved): "
        f"{median(prod_walls):.2f} s against {median(prod_each_walls):.2f} s, "
        f"{median(prod_walls) / median(prod_each_walls):.2f}x"
    )
    warm = (median(prod_walls) - median(prod_bare_walls)) / median(prod_walls)
    cold = (median(prod_cold_walls) - median(prod_bare_walls)) / median(prod_cold_walls)
    print(
        f"prod stack, the Serving performance stage (interleaved): without it {median(prod_bare_walls):.2f} s; with it, "
        f"its answer read back (servers unchanged) {median(prod_walls):.2f} s, {warm:.1%} of the preview's wall time; "
        f"aiconfigurator run (cold) {median(prod_cold_walls):.2f} s, {cold:.1%}"
    )


def print_pack_table(rows: list[dict]) -> None:
    columns = ["models x tenants", "whole preview", "the same, pack decoding once per policy", "ratio"]
    print("| " + " | ".join([*columns, "pack's wait (once per request / per policy)"]) + " |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['models']} x {row['tenants']} | {row['previewSeconds']:.2f} s | {row['previewSecondsDecodeEach']:.2f} s | "
            f"{row['previewSeconds'] / row['previewSecondsDecodeEach']:.2f}x | "
            f"{row['stageSeconds'][PACK_WAIT]:.2f} s / {row['packWaitSecondsDecodeEach']:.2f} s |"
        )


def print_evaluation_table(rows: list[dict]) -> None:
    print(
        "| models x tenants | resources | whole preview | evaluate (program) | baseline: same registrations | ratio "
        "| baseline: custom resources only | ratio | ms/resource (program / baseline) | KiB/resource (program / baseline) | "
        "peak RSS |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['models']} x {row['tenants']} | {row['resources']} | {row['previewSeconds']:.2f} s | "
            f"{row['evalSeconds']:.2f} s | "
            f"{row['flatSeconds']:.2f} s | {row['evalSeconds'] / row['flatSeconds']:.2f}x | "
            f"{row['flatCustomOnlySeconds']:.2f} s ({row['flatCustomOnlyResources']}) | "
            f"{row['evalSeconds'] / row['flatCustomOnlySeconds']:.2f}x | "
            f"{row['evalSeconds'] / row['resources'] * 1000:.2f} / "
            f"{row['flatSeconds'] / max(row['flatResources'], 1) * 1000:.2f} | "
            f"{row['evalGrowthKiBPerResource']:.1f} / {row['flatGrowthKiBPerResource']:.1f} | {row['peakMiB']:.0f} MiB |"
        )


if __name__ == "__main__":
    main()
