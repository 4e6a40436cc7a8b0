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
        started = time.perf_counter()
        if not self.quiet:
            print(f"[{self.index}/{self.total}] {name} ...", file=sys.stderr, flush=True)
        result = step()
        seconds = time.perf_counter() - started
        self.stages.append({"name": name, "seconds": round(seconds, 4)})
        return result
