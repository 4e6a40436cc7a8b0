"""The preview's stages as it runs them: each announced on stderr as `[i/n] name ...` and timed, the times kept for
the report (`stages`) and the benchmark."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class Progress:
    def __init__(self, total: int, quiet: bool):
        self.total, self.index, self.quiet = total, 0, quiet
        self.stages: list[dict[str, float | str]] = []

    def run(self, name: str, step: Callable[[], T]) -> T:
        self.index += 1
        started, cpu = time.perf_counter(), time.process_time()
        if not self.quiet:
            print(f"[{self.index}/{self.total}] {name} ...", file=sys.stderr, flush=True)
        result = step()
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
        # CPU: this process's, all its threads (the pack and its client are other processes: report.json cpuSeconds),
        # and the program's process for its stage (`add_cpu`).
        self.stages.append({"name": name, "seconds": round(seconds, 4), "cpuSeconds": round(cpu_seconds, 4)})
        return result

    def add_cpu(self, seconds: float) -> None:
        """CPU the last stage spent in a process of its own, which it waited for (the program's:
        preview/evaluation_process.py)."""
        last = self.stages[-1]
        last["cpuSeconds"] = round(float(last["cpuSeconds"]) + seconds, 4)
