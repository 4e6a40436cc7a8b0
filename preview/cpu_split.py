"""A CPU of its own for the program while it is evaluated: the program's process on one CPU, the preview's process
and its other children (the policy pack, its client, an aiconfigurator worker) on the others, each of them back on
the CPUs it had once the program is done.

While the program runs in its own process (preview/evaluation_process.py), that process is the one the preview waits
for; beside it the pack analyzes each resource as it is registered, the client makes the calls and the preview's
process relays the requests between them: together most of a CPU at 500 models. Left to the scheduler, all of them
share both CPUs of a 2-CPU machine, and the program's process is preempted and moved between them. Measured on 2
CPUs, previews with and without the split interleaved: 100 models 8.80 -> 7.00 s (medians of three pairs; the
evaluation 6.26 -> 5.11 s), 500 models 52.05 -> 42.24 s (the evaluation 40.61 -> 30.18 s; the program alone, in one
process with nothing beside it, 28.6 s), staging 1.29 -> 1.25 s (medians of eight pairs; the evaluation 0.63 -> 0.50
s: the pack, squeezed beside the preview's process meanwhile, has more left to do after it). The program's process
has one thread running at a time anyway (the SDK's registration threads take turns under its interpreter lock). With
one CPU allowed nothing is pinned, nor where the system has no `sched_setaffinity` or refuses it: the split only
changes how fast the preview is, never what it finds.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Iterator
from typing import NamedTuple


class CpuSplit(NamedTuple):
    """The CPUs this process may use (`allowed`), the one the program's process gets and the rest."""

    allowed: frozenset[int]
    program: frozenset[int]
    rest: frozenset[int]


def cpu_split(allowed: Collection[int], current: int | None) -> CpuSplit | None:
    """The CPU this process runs on (`current`, else the lowest-numbered allowed one) for the program, the others for
    the rest; None with fewer than two. The current one rather than always the first: previews run side by side (the
    test suite's workers, `make golden`'s stacks) then mostly give their programs different CPUs."""
    if len(allowed) < 2:
        return None
    program = current if current is not None and current in allowed else min(allowed)
    return CpuSplit(frozenset(allowed), frozenset({program}), frozenset(allowed) - {program})


def this_process_split() -> CpuSplit | None:
    """The split of the CPUs this process may use (None where the system cannot pin a process)."""
    if not hasattr(os, "sched_getaffinity") or not hasattr(os, "sched_setaffinity"):
        return None
    return cpu_split(os.sched_getaffinity(0), current_cpu())


def current_cpu() -> int | None:
    """The CPU this process last ran on (proc(5): /proc/self/stat's 39th field, `processor`), None if unreadable."""
    try:
        with open("/proc/self/stat") as stat:
            # The fields after the command's name, which is in parentheses and may hold spaces and parentheses itself.
            fields = stat.read().rpartition(")")[2].split()
        return int(fields[39 - 3])
    except (OSError, ValueError, IndexError):
        return None


def pin_this_thread(cpus: frozenset[int]) -> None:
    """The calling thread onto `cpus` (in a process just forked: the whole process; the threads it starts inherit)."""
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, cpus)


def pin_process(pid: int, cpus: frozenset[int]) -> dict[int, frozenset[int]]:
    """Every thread of process `pid` onto `cpus` (one it starts later inherits its starter's CPUs); each one's CPUs
    before, by thread. A thread or a process gone meanwhile, or CPUs the system refuses, are left as they are."""
    before: dict[int, frozenset[int]] = {}
    for thread in _threads(pid):
        with contextlib.suppress(OSError):
            before[thread] = frozenset(os.sched_getaffinity(thread))
            os.sched_setaffinity(thread, cpus)
    return before


def _threads(pid: int) -> list[int]:
    try:
        return [int(thread) for thread in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        return []


def children(pid: int) -> list[int]:
    """The processes `pid` started that are still running (or not yet reaped), by its threads' lists."""
    found: list[int] = []
    for thread in _threads(pid):
        with contextlib.suppress(OSError, ValueError):
            with open(f"/proc/{pid}/task/{thread}/children") as listed:
                found.extend(int(child) for child in listed.read().split())
    return found


@contextlib.contextmanager
def apart_from(program_pid: int, split: CpuSplit | None) -> Iterator[None]:
    """While inside: this process and its children but the program's (`program_pid`, which pins itself: see
    `pin_this_thread`) on the rest of the CPUs; at the end, every thread of them back on the CPUs it had, and those
    started meanwhile (a worker started for the stack's servers, its threads) on every allowed CPU."""
    if split is None:
        yield
        return
    own = os.getpid()
    before: dict[int, frozenset[int]] = {}
    for pid in [own, *children(own)]:
        if pid != program_pid:
            before.update(pin_process(pid, split.rest))
    try:
        yield
    finally:
        for pid in [own, *children(own)]:
            if pid != program_pid:
                for thread in _threads(pid):
                    with contextlib.suppress(OSError):
                        os.sched_setaffinity(thread, before.get(thread, split.allowed))
