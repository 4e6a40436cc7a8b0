"""Benchmark the offline preview (not a test: figures go into the README).

For every committed stack and for generated stacks of N models x M tenants it reports the whole preview
against its floor: a fresh process that registers the very same resources with the very same inputs (read back
from the preview's resources.json) under the same mock engine and does nothing else (`measure.py --once` with the
flat program), the two interleaved; each stage's share of the preview and the preview process's peak RSS. For the
generated stacks also the program-evaluation stage against the flat baseline's evaluation (both warmed up), memory
per resource, and the pack decoding once per request against once per policy. Two baselines: every recorded
resource (components as bare component registrations, with their parents: the same URNs), and the custom resources
alone. It also times the prod stack's Serving performance stage: read back, cold (a worker started and waited for), and
asked of a worker already running (started before the rounds, each round's servers changed since).

    .venv/bin/python benchmarks/bench_preview.py [--sizes 10 100 500 1000] [--repeat N] [--prod-repeat 5]
        [--stacks dev staging prod]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.generate import generate_stack  # noqa: E402
from benchmarks.process_memory import TreeMemory  # noqa: E402
from preview.performance_prediction import WORKERS_FOLDER, performance_python, worker_pid, worker_socket  # noqa: E402

PY = sys.executable


@dataclass(frozen=True)
class Finished:
    """A command run to its end: its wall time, its output, its peak RSS (os.wait4's ru_maxrss: the largest of the
    process and the children it waited for, not their sum) and its CPU time (user and system, the process's and its
    waited-for children's summed: the program's process, the pack, its client and aiconfigurator's worker included)."""

    seconds: float
    stdout: str
    peak_kib: int
    cpu_seconds: float
    # The largest sum of the RSS of the process and its descendants at one moment (sampled from /proc every 50 ms):
    # the preview, the policy pack, its client and any aiconfigurator worker together.
    peak_tree_kib: int = 0
    # Each process's part of that sum at that moment, by its role (benchmarks/process_memory.py ROLES).
    peak_parts_kib: dict[str, int] = field(default_factory=dict)


def run(cmd: list[str], env: dict[str, str] | None = None) -> Finished:
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=err, text=True, env={**os.environ, **(env or {})})
        memory = TreeMemory(process.pid)
        _, status, usage = os.wait4(process.pid, 0)
        peak_tree = memory.stop()
        elapsed = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{stdout}\n{stderr}")
    cpu = usage.ru_utime + usage.ru_stime
    return Finished(elapsed, stdout, usage.ru_maxrss, cpu, max(peak_tree, usage.ru_maxrss), memory.peak_parts)


def measure(program: Path, stack_file: Path, env: dict[str, str] | None = None) -> dict:
    result = run([PY, str(ROOT / "benchmarks" / "measure.py"), "--program", str(program), "--config-file", str(stack_file)], env)
    return json.loads(result.stdout.strip().splitlines()[-1])


def floor(stack: str, stack_file: Path, resources: Path) -> Finished:
    """The whole-process floor of a preview: a fresh process registering the same resources once, cold."""
    flat = str(ROOT / "benchmarks" / "flat_program")
    command = [PY, str(ROOT / "benchmarks" / "measure.py"), "--program", flat, "--config-file", str(stack_file)]
    return run([*command, "--stack", stack, "--once"], {"BENCH_RESOURCES": str(resources)})


class PreviewRuns:
    """Whole previews and their floors, run interleaved: wall and CPU time, peak RSS, each stage's wall and CPU time
    (the preview's own, the program's process's in its stage), the pack's CPU and the preview's processes' together."""

    def __init__(self) -> None:
        self.walls: list[float] = []
        self.cpus: list[float] = []
        self.peaks: list[int] = []
        self.tree_peaks: list[int] = []
        self.tree_parts: list[dict[str, int]] = []
        self.stages: list[dict[str, float]] = []
        self.stage_cpus: list[dict[str, float]] = []
        self.pack_cpus: list[float] = []
        self.floors: list[Finished] = []

    def add(self, finished: Finished, report: dict, floor_run: Finished) -> None:
        self.walls.append(finished.seconds)
        self.cpus.append(finished.cpu_seconds)
        self.peaks.append(finished.peak_kib)
        self.tree_peaks.append(finished.peak_tree_kib)
        self.tree_parts.append(finished.peak_parts_kib)
        self.stages.append(_stages(report))
        self.stage_cpus.append({s["name"]: s.get("cpuSeconds", 0.0) for s in report["stages"]})
        self.pack_cpus.append(report.get("cpuSeconds", {}).get("policyPack", 0.0))
        self.floors.append(floor_run)

    def row(self) -> dict:
        return {
            "previewSeconds": median(self.walls),
            "floorSeconds": median([f.seconds for f in self.floors]),
            "previewCpuSeconds": median(self.cpus),
            "floorCpuSeconds": median([f.cpu_seconds for f in self.floors]),
            "packCpuSeconds": median(self.pack_cpus),
            "packCpuShare": median([pack / cpu for pack, cpu in zip(self.pack_cpus, self.cpus)]),
            "stageSeconds": {k: median([s[k] for s in self.stages]) for k in self.stages[0]},
            "stageCpuSeconds": {k: median([s[k] for s in self.stage_cpus]) for k in self.stage_cpus[0]},
            "previewPeakMiB": max(self.peaks) / 1024,
            "previewTreePeakMiB": max(self.tree_peaks) / 1024,
            # The parts of the largest of those peaks, by process.
            "previewTreePeakParts": {
                name: kib / 1024 for name, kib in self.tree_parts[self.tree_peaks.index(max(self.tree_peaks))].items()
            },
        }


def preview(stack_args: list[str], out: Path, env: dict[str, str] | None = None) -> tuple[Finished, dict]:
    finished = run([PY, "-m", "preview", *stack_args, "--out", str(out), "--json"], env)
    return finished, json.loads(finished.stdout)


# The policy SDK's own decoding, once per policy (policies/inference_governance/decoding.py).
DECODE_EACH = {"POLICY_PACK_DECODE_EACH": "1"}
# A preview whose Serving performance stage finds no aiconfigurator (it reports "not run" and predicts nothing).
WITHOUT_PERFORMANCE = {"PERFORMANCE_PYTHON": "/nonexistent/python"}
# The worker the previews of the warm mode ask stays up for the whole benchmark; it is stopped at the end.
WARM_IDLE = {"PERFORMANCE_WORKER_IDLE_SECONDS": "3600"}
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


# Above this many models the pack decoding once per policy is not run again: it is the SDK's own cost, measured
# at the smaller sizes, and at 1,000 models it would take most of the benchmark's hour.
DECODE_EACH_UP_TO = 500
STACKS = ("dev", "staging", "prod")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=_count(2000), nargs="+", default=[10, 100, 500, 1000], help="models per stack")
    parser.add_argument("--repeat", type=_count(100), help="runs per size (default: 5 up to 100 models, 3 above)")
    parser.add_argument("--prod-repeat", type=_count(100), default=5, help="runs per committed stack")
    parser.add_argument("--stacks", nargs="+", choices=STACKS, default=list(STACKS), help="committed stacks")
    args = parser.parse_args()
    # Every preview here starts its Serving performance worker, if any, and waits for it to exit (its CPU time is the
    # preview's), but the warm mode's, which asks the one worker bench_prod keeps running.
    os.environ["PERFORMANCE_WORKER_IDLE_SECONDS"] = "0"

    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        stacks = [bench_stack(tmpdir, stack, args.prod_repeat) for stack in args.stacks]
        rows = [bench_size(tmpdir, models, args.repeat or (5 if models <= 100 else 3)) for models in args.sizes]
        prod_runs, prod_report = bench_prod(tmpdir, args.prod_repeat)

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print_floor_table(stacks + rows)
    print()
    print_stage_shares(stacks + rows)
    print()
    print_cpu_table(stacks + rows)
    print()
    print_prod(prod_runs, prod_report, args.prod_repeat)
    print()
    print_pack_table([row for row in rows if "previewSecondsDecodeEach" in row])
    print()
    print_evaluation_table(rows)
    print()
    prod = {
        name: {"seconds": median([r.seconds for r in done]), "cpuSeconds": median([r.cpu_seconds for r in done])}
        for name, done in prod_runs.items()
    }
    print(json.dumps({"stacks": stacks, "sizes": rows, "prod": prod}, indent=2))


def _stages(report: dict) -> dict[str, float]:
    return {s["name"]: s["seconds"] for s in report["stages"]}


def bench_stack(tmpdir: Path, stack: str, repeat: int) -> dict:
    """A committed stack's whole preview as a user runs it, against its whole-process floor, interleaved."""
    out = tmpdir / f"stack-{stack}"
    stack_file = ROOT / "stacks" / f"Pulumi.{stack}.yaml"
    runs = PreviewRuns()
    for _ in range(repeat):
        finished, report = preview(["--stack", stack], out)
        runs.add(finished, report, floor(stack, stack_file, out / "resources.json"))
    return {"stack": stack, "resources": report["counts"]["resources"], **runs.row()}


def bench_size(tmpdir: Path, models: int, repeat: int) -> dict:
    """A generated stack of `models` models (a tenant to every 10, at least 2): its whole preview against its floor,
    with the pack decoding once per request and (up to DECODE_EACH_UP_TO models) once per policy, and its evaluation
    against the two flat baselines."""
    tenants = max(2, models // 10)
    stack_file = tmpdir / f"Pulumi.bench-{models}.yaml"
    config = {f"inference-platform:{k}": v for k, v in generate_stack(models, tenants).items()}
    config["aws:region"] = "us-east-1"
    stack_file.write_text(yaml.safe_dump({"config": config}))
    out = tmpdir / f"out-{models}"
    runs, each_walls, each_waits = PreviewRuns(), [], []
    for _ in range(repeat):
        finished, report = preview(["--stack", "bench", "--config-file", str(stack_file)], out)
        runs.add(finished, report, floor("bench", stack_file, out / "resources.json"))
        if models <= DECODE_EACH_UP_TO:
            # Interleaved: the same preview with the pack decoding each resource once per policy.
            finished, report = preview(["--stack", "bench", "--config-file", str(stack_file)], out, DECODE_EACH)
            each_walls.append(finished.seconds)
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
    row = {
        "stack": f"{models} x {tenants}",
        "models": models,
        "tenants": tenants,
        "resources": resources,
        "custom": program[0]["custom"],
        **runs.row(),
        "evalSeconds": median([p["seconds"] for p in program]),
        "flatSeconds": median([f["seconds"] for f in flat]),
        "flatResources": flat[0]["resources"],
        "flatCustomOnlySeconds": median([f["seconds"] for f in flat_custom]),
        "flatCustomOnlyResources": flat_custom[0]["resources"],
        "evalGrowthKiBPerResource": median([p["growthKiB"] for p in program]) / resources,
        "flatGrowthKiBPerResource": median([f["growthKiB"] for f in flat]) / max(flat[0]["resources"], 1),
        "peakMiB": max(p["peakKiB"] for p in program) / 1024,
    }
    if each_walls:
        row["previewSecondsDecodeEach"] = median(each_walls)
        row["packWaitSecondsDecodeEach"] = median(each_waits)
    return row


def bench_prod(tmpdir: Path, repeat: int) -> tuple[dict[str, list[Finished]], dict]:
    """The prod stack's whole preview as a user runs it, interleaved with the same preview with the pack decoding once
    per policy, without the Serving performance stage, with it cold, and with it asking a worker already running; the
    last run's report."""
    runs: dict[str, list[Finished]] = {"read back": [], "decode each": [], "bare": [], "cold": [], "warm": []}
    warm = WarmWorker(tmpdir)
    try:
        for round_ in range(repeat):
            finished, report = preview(["--stack", "prod"], tmpdir / "prod")
            runs["read back"].append(finished)
            runs["decode each"].append(preview(["--stack", "prod"], tmpdir / "prod-each", DECODE_EACH)[0])
            # Interleaved too: the same preview without the Serving performance stage (no aiconfigurator to run), and
            # with it cold (an empty cache: aiconfigurator runs); the first runs above read its answer back.
            runs["bare"].append(preview(["--stack", "prod"], tmpdir / "prod-bare", WITHOUT_PERFORMANCE)[0])
            empty_cache = {"PERFORMANCE_CACHE_DIR": tempfile.mkdtemp(dir=tmpdir)}
            runs["cold"].append(preview(["--stack", "prod"], tmpdir / "prod-cold", empty_cache)[0])
            runs["warm"].append(warm.preview(round_))
    finally:
        warm.stop()
    return runs, report


class WarmWorker:
    """The warm mode: one worker started before the rounds (by a preview of prod as committed, which leaves it
    running), asked by each round's preview about servers changed since (prod with the chat profile's peak prompt
    tokens another number each round, so the estimates are new ones), its answer cache emptied before each. A preview's
    CPU time is its processes' and the worker's spent meanwhile (/proc: the worker is no child of the preview's)."""

    def __init__(self, tmpdir: Path) -> None:
        self.tmpdir = tmpdir
        self.cache = tmpdir / "prod-warm-cache"
        self.env = {"PERFORMANCE_CACHE_DIR": str(self.cache), **WARM_IDLE}
        preview(["--stack", "prod"], tmpdir / "prod-warm", self.env)
        socket, why = worker_socket(performance_python(), self.cache)
        self.pid = worker_pid(socket) if socket is not None else None
        if self.pid is None:
            raise SystemExit(f"no Serving performance worker stayed up in {self.cache}: {why or 'is .venv-perf installed?'}")

    def preview(self, round_: int) -> Finished:
        stack = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())
        stack["config"]["inference-platform:profiles"]["chat"]["peak"]["promptTokens"] += 8 * (round_ + 1)
        stack_file = self.tmpdir / "Pulumi.prod-warm.yaml"
        stack_file.write_text(yaml.safe_dump(stack))
        for kept in self.cache.iterdir():
            if kept.name != WORKERS_FOLDER:
                shutil.rmtree(kept)
        before = _cpu_seconds(self.pid)
        finished, report = preview(["--stack", "prod", "--config-file", str(stack_file)], self.tmpdir / "prod-warm", self.env)
        worker = _cpu_seconds(self.pid) - before
        if report["performance"]["data"]["answeredBy"] != "running worker":
            raise SystemExit(f"the warm preview was answered by {report['performance']['data']['answeredBy']}")
        return Finished(finished.seconds, finished.stdout, finished.peak_kib, finished.cpu_seconds + worker)

    def stop(self) -> None:
        if self.pid is not None:
            os.kill(self.pid, signal.SIGTERM)


def _cpu_seconds(pid: int | None) -> float:
    """A process's user and system CPU time so far (/proc/<pid>/stat utime and stime, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def print_floor_table(rows: list[dict]) -> None:
    print(
        "| stack | resources | whole preview | floor: a process registering the same resources | ratio | peak RSS "
        "(its largest process) | peak RSS (all its processes at once) | KiB per resource (all) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['stack']} | {row['resources']} | {row['previewSeconds']:.2f} s | {row['floorSeconds']:.2f} s | "
            f"{row['previewSeconds'] / row['floorSeconds']:.2f}x | {row['previewPeakMiB']:.0f} MiB | "
            f"{row['previewTreePeakMiB']:.0f} MiB | {row['previewTreePeakMiB'] * 1024 / row['resources']:.0f} |"
        )
    print()
    for row in rows:
        parts = ", ".join(f"{name} {mib:.0f} MiB" for name, mib in sorted(row["previewTreePeakParts"].items()))
        print(f"{row['stack']}: all its processes at their peak, by process: {parts}")


def print_stage_shares(rows: list[dict]) -> None:
    """Each stage's share of the preview's wall time (medians), largest first, the ones under 2% summed."""
    for row in rows:
        stages = sorted(row["stageSeconds"].items(), key=lambda item: -item[1])
        shown = [(name, seconds) for name, seconds in stages if seconds >= 0.02 * row["previewSeconds"]]
        rest = sum(seconds for name, seconds in stages if (name, seconds) not in shown)
        parts = [f"{name} {seconds / row['previewSeconds']:.0%}" for name, seconds in shown]
        print(f"{row['stack']}: " + "; ".join([*parts, f"the other stages {rest / row['previewSeconds']:.0%}"]))


def print_cpu_table(rows: list[dict]) -> None:
    """CPU time (medians): the preview's processes together against the floor's, the policy pack's share of it, and
    each stage's CPU in the preview's own process, largest first (those under 2% of the whole summed)."""
    print("| stack | preview CPU (all its processes) | floor CPU | ratio | the pack's CPU | its share |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['stack']} | {row['previewCpuSeconds']:.2f} s | {row['floorCpuSeconds']:.2f} s | "
            f"{row['previewCpuSeconds'] / row['floorCpuSeconds']:.2f}x | {row['packCpuSeconds']:.2f} s | "
            f"{row['packCpuShare']:.0%} |"
        )
    print()
    for row in rows:
        stages = sorted(row["stageCpuSeconds"].items(), key=lambda item: -item[1])
        whole = row["previewCpuSeconds"]
        shown = [(name, cpu) for name, cpu in stages if cpu >= 0.02 * whole]
        rest = sum(cpu for name, cpu in stages if (name, cpu) not in shown)
        parts = [f"{name} {cpu:.2f} s ({cpu / whole:.0%})" for name, cpu in shown]
        print(f"{row['stack']} CPU by stage: " + "; ".join([*parts, f"the other stages {rest:.2f} s"]))


def print_prod(runs: dict[str, list[Finished]], prod_report: dict, repeat: int) -> None:
    walls = {name: median([r.seconds for r in finished]) for name, finished in runs.items()}
    cpus = {name: median([r.cpu_seconds for r in finished]) for name, finished in runs.items()}
    prod_walls = [r.seconds for r in runs["read back"]]
    print(
        f"prod stack: whole offline preview median {median(prod_walls):.2f} s, min {min(prod_walls):.2f} s, max "
        f"{max(prod_walls):.2f} s "
        f"({repeat} runs), {prod_report['counts']['resources']} resources, stages of the last run: "
        + ", ".join(f"{s['name']} {s['seconds']:.2f} s" for s in prod_report["stages"])
    )
    print(
        f"prod stack, the pack decoding once per request against once per policy (interleaved): "
        f"{walls['read back']:.2f} s against {walls['decode each']:.2f} s, "
        f"{walls['read back'] / walls['decode each']:.2f}x"
    )

    def share(name: str) -> str:
        wall = (walls[name] - walls["bare"]) / walls[name]
        cpu = (cpus[name] - cpus["bare"]) / cpus[name]
        return f"{walls[name]:.2f} s, {wall:.1%} of the preview's wall time ({cpus[name]:.2f} CPU-s, {cpu:.1%} of its CPU time)"

    print(
        f"prod stack, the Serving performance stage (interleaved): without it {walls['bare']:.2f} s "
        f"({cpus['bare']:.2f} CPU-s, the preview's processes together); with it, its answer read back (servers unchanged) "
        f"{share('read back')}; aiconfigurator run (cold) {share('cold')}; aiconfigurator asked through a worker "
        f"already running (servers changed since it started) {share('warm')}"
    )


def print_pack_table(rows: list[dict]) -> None:
    columns = ["models x tenants", "whole preview", "the same, pack decoding once per policy", "ratio"]
    print("| " + " | ".join([*columns, "pack's wait (once per request / per policy)"]) + " |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['stack']} | {row['previewSeconds']:.2f} s | {row['previewSecondsDecodeEach']:.2f} s | "
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
