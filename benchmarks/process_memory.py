"""The memory of a process and its descendants together, sampled while it runs: a preview is four processes (the
preview, the program's while it is evaluated, the policy pack and its client) and an aiconfigurator worker may be a
fifth."""

from __future__ import annotations

import threading
from pathlib import Path

# Which of a preview's processes a command line is, by what it runs.
ROLES = (("pulumi.policy", "pack"), ("policy_client.py", "client"), ("performance_worker", "aiconfigurator worker"))


def role(command: list[str]) -> str:
    """The part a preview's process plays by its command line: the pack, its client, an aiconfigurator worker, or the
    preview (itself, and the process it forks to evaluate the program in, which `_tree_rss_kib` tells apart as
    "program")."""
    line = " ".join(command)
    return next((name for marker, name in ROLES if marker in line), "preview")


def _tree_rss_kib(pid: int) -> dict[str, int]:
    """The RSS of a process and its descendants now, by each one's role (status VmRSS; the children of each of its
    threads, /proc/<pid>/task/<tid>/children, since a child started from another thread is listed under that thread
    only); none for any gone."""
    parts: dict[str, int] = {}
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            command = Path(f"/proc/{current}/cmdline").read_bytes().decode(errors="replace").split("\0")
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
        rss = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
        name = role(command)
        if name == "preview" and current != pid:
            # Forked by the preview, its command line the preview's: the process the program is evaluated in
            # (preview/evaluation_process.py).
            name = "program"
        parts[name] = parts.get(name, 0) + rss
    return parts


class TreeMemory:
    """Samples a process tree's summed RSS until stopped, keeping the largest and, at that moment, each role's part."""

    def __init__(self, pid: int) -> None:
        self.peak_kib = 0
        self.peak_parts: dict[str, int] = {}
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(pid,), daemon=True)
        self._thread.start()

    def _sample(self, pid: int) -> None:
        while not self._stopped.wait(0.05):
            parts = _tree_rss_kib(pid)
            total = sum(parts.values())
            if total > self.peak_kib:
                self.peak_kib, self.peak_parts = total, parts

    def stop(self) -> int:
        self._stopped.set()
        self._thread.join()
        return self.peak_kib
