"""The memory of a process and its descendants together, sampled while it runs: a preview is three processes (the
program, the policy pack and its client) and an aiconfigurator worker may be a fourth."""

from __future__ import annotations

import threading
from pathlib import Path


def _tree_rss_kib(pid: int) -> int:
    """The RSS of a process and its descendants now (status VmRSS; the children of each of its threads,
    /proc/<pid>/task/<tid>/children, since a child started from another thread is listed under that thread only);
    0 for any gone."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total


class TreeMemory:
    """Samples a process tree's summed RSS until stopped, keeping the largest."""

    def __init__(self, pid: int) -> None:
        self.peak_kib = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(pid,), daemon=True)
        self._thread.start()

    def _sample(self, pid: int) -> None:
        while not self._stopped.wait(0.05):
            self.peak_kib = max(self.peak_kib, _tree_rss_kib(pid))

    def stop(self) -> int:
        self._stopped.set()
        self._thread.join()
        return self.peak_kib
