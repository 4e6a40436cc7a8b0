"""The program evaluated in a process of its own, forked for it, which hands back what it recorded and exits.

The SDK's mock engine keeps everything the program built to the end: every resource object, its outputs and their
futures, each resource's properties twice more (what the monitor serialized and what it answered), and the
program's own objects. The preview needs only the records (preview/engine.py `RecordedResource`, a fifth of it at 100
models). Freeing the rest in the process would take a full collection of a heap of millions of objects (the
evaluation runs with the collector paused and freezes what it built: preview/gc_tuning.py), and CPython keeps much
of what it frees. So the program runs in a child forked for it (it inherits the imported modules, nothing is imported
twice), the records are written to an unlinked temporary file, the child exits, and the parent reads them: at 1,000
models the preview's process held 1.6 GiB while the policy pack checked the stack beside it, where the parent now
holds the records.

While the child runs it has a CPU of its own, the parent and the pack's processes the others (preview/cpu_split.py),
and it sends each custom resource's AnalyzeRequest and stack entry (built there:
preview/policy_session.py `requests_for`) and each stack output as the program exports it over a pipe; the parent
hands them to the policy session (`forward`, numbered in the order they come, as in one process) and to the
listener. A stack output that cannot be pickled (an `Output`, where the program exports one) is not sent: the
listener (preview/performance_prediction.py `on_export`) uses only plain tables. What the child raises comes back as
it would have been raised: `pulumi.RunError` (a config error, said as the CLI says it), `DuplicateUrnError`, and
anything else as `ProgramCrashed`, its traceback the child's.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import pickle
import signal
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import IO, Any, NamedTuple, NoReturn

import pulumi

from .cpu_split import apart_from, pin_this_thread, this_process_split
from .engine import DuplicateUrnError, Evaluation, ExportListener, RecordedResource, evaluate, is_plain_data
from .gc_tuning import collection_paused
from .policy_session import PolicySession
from .stack_config import StackConfig

# What the child sends, each a pickled tuple whose first item is one of these.
_RESOURCE, _EXPORTED, _DONE, _RUN_ERROR, _DUPLICATE_URNS, _CRASHED, _EXITED = range(7)
# prctl(2)'s PR_SET_PDEATHSIG: the child is killed when the preview is (a SIGKILL leaves no `finally` to kill it).
_PR_SET_PDEATHSIG = 1


class ProgramCrashed(Exception):
    """The program raised what is not a config error: `trace` is its traceback, as the child formatted it."""

    def __init__(self, trace: str):
        super().__init__(trace)
        self.trace = trace


def evaluate_apart(program_dir: Path, config: StackConfig, policies: PolicySession, exported: ExportListener) -> Evaluation:
    """`engine.evaluate` in a forked child: the policy session hears of each custom resource and `exported` of each
    stack output as the program makes them; what the program recorded is returned, or what it raised raised. The
    policy session's exchange starts once the child is forked (`PolicySession.start`): its thread imports modules as
    it goes, and a module lock it held at the fork would stay held in the child."""
    sys.stdout.flush()
    sys.stderr.flush()
    split = this_process_split()
    with tempfile.TemporaryFile() as records:
        read_end, write_end = os.pipe()
        try:
            pid = os.fork()
        except BaseException:
            os.close(read_end)
            os.close(write_end)
            raise
        if pid == 0:  # the child: its every way out is os._exit (tests/test_evaluation_process.py)
            try:
                if split is not None:
                    pin_this_thread(split.program)
                os.close(read_end)
                _child(program_dir, config, policies, os.fdopen(write_end, "wb"), records)
            finally:
                os._exit(1)
        try:
            os.close(write_end)
            with os.fdopen(read_end, "rb") as messages, apart_from(pid, split):
                policies.start()
                outcome = _relay(messages, policies, exported)
            # Read while the child's exit frees its memory (the kernel takes a while over gigabytes), then reaped.
            evaluation = _records(records) if outcome is not None and outcome[0] == _DONE else None
            _, status, usage = os.wait4(pid, 0)
            pid = 0
            if evaluation is None:
                _raise(outcome, status)
            evaluation.program_cpu_seconds = usage.ru_utime + usage.ru_stime
            return evaluation
        finally:
            if pid:
                # The parent stopped early (an interrupt, a listener that raised): the child does not outlive it.
                with contextlib.suppress(ProcessLookupError, ChildProcessError):
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)


def _relay(messages: IO[bytes], policies: PolicySession, exported: ExportListener) -> tuple[Any, ...] | None:
    """The child's messages handed on as they come; its last one (or None, if it ended without saying how, or was
    killed within a message)."""
    while True:
        try:
            message = pickle.load(messages)
        except (EOFError, pickle.UnpicklingError):
            return None
        kind = message[0]
        if kind == _RESOURCE:
            policies.forward(*message[1:])
        elif kind == _EXPORTED:
            exported(*message[1:])
        else:
            return message


def _raise(outcome: tuple[Any, ...] | None, status: int) -> NoReturn:
    """What the program raised, raised here."""
    if outcome is None:
        raise ProgramCrashed(f"the program's process ended ({_ended(status)}) without a result\n")
    kind, detail = outcome
    if kind == _RUN_ERROR:
        raise pulumi.RunError(detail)
    if kind == _DUPLICATE_URNS:
        raise DuplicateUrnError(detail)
    if kind == _EXITED:
        # The program called sys.exit: the preview exits as it would have with the program in its own process.
        raise SystemExit(detail)
    raise ProgramCrashed(detail)


def _records(records: IO[bytes]) -> Evaluation:
    """The records the child wrote, once it said it was done."""
    records.seek(0)
    # Records are trees of plain values: no cycles for the collector to find among the millions of objects read
    # (0.76 s against 0.44 s at 500 models with the young collections walking them).
    with collection_paused():
        stack_outputs = {name: _stack_output(sent) for name, sent in pickle.load(records).items()}
        resources = []
        while True:
            try:
                resources.append(pickle.load(records))
            except EOFError:
                return Evaluation(resources=resources, stack_outputs=stack_outputs)


def _stack_output(sent: Any) -> Any:
    """A stack output as the child sent it: plain data as it is; anything else unpickled, or, where it cannot be (a
    class of the program's own `__main__`, a module only the program's folder holds), the text report.json would
    have written for it."""
    if not isinstance(sent, _Pickled):
        return sent
    if sent.data is not None:
        try:
            return pickle.loads(sent.data)
        except Exception:  # noqa: BLE001 - whatever the parent cannot rebuild is shown as its text
            pass
    return json.loads(sent.text)


class _Pickled(NamedTuple):
    """A stack output that is not plain data: its pickle (None if it has none) and its JSON with `str` for what JSON
    has no form for, as report.json writes it (`json.dumps(..., default=str)`)."""

    data: bytes | None
    text: str


def _sent_stack_output(value: Any) -> Any:
    if is_plain_data(value):
        return value
    try:
        data: bytes | None = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - a resource object, an Output: shown as its text
        data = None
    return _Pickled(data, json.dumps(value, default=str))


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


def _child(program_dir: Path, config: StackConfig, policies: PolicySession, pipe: IO[bytes], records: IO[bytes]) -> None:
    """Evaluate, send, exit: never returns (the parent's code after the fork is not the child's to run)."""
    code = 1
    try:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        lock = threading.Lock()  # the SDK registers from a thread pool: one message at a time on the pipe

        def send(message: tuple[Any, ...]) -> None:
            data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
            with lock:
                pipe.write(data)
                pipe.flush()

        def registered(resource: RecordedResource, provider: RecordedResource | None, inputs: Any, state: Any) -> None:
            built = policies.requests_for(resource, provider, inputs, state)
            if built is not None:
                send((_RESOURCE, *built))

        def heard(name: str, value: Any) -> None:
            # Plain tables only, which is what the listener uses (preview/performance_prediction.py `on_export`): an
            # Output cannot be sent, and a class of the program's own would not be found by the parent.
            if is_plain_data(value):
                send((_EXPORTED, name, value))

        # An event loop of its own: one the parent made (a process that evaluated before, as the test suite does)
        # would hand the SDK's registrations to an executor whose threads did not come through the fork.
        asyncio.set_event_loop(asyncio.new_event_loop())
        try:
            evaluation = evaluate(program_dir, config, listener=registered, exported=heard)
            # One pickle each: a pickle's memo holds every object it wrote (at 1,000 models, 130 MiB more in this
            # process at its peak for one pickle of all); a record's inputs and outputs share values, kept shared.
            outputs = {name: _sent_stack_output(value) for name, value in evaluation.stack_outputs.items()}
            pickle.dump(outputs, records, protocol=pickle.HIGHEST_PROTOCOL)
            for resource in evaluation.resources:
                pickle.dump(resource, records, protocol=pickle.HIGHEST_PROTOCOL)
            records.flush()
        except pulumi.RunError as error:
            send((_RUN_ERROR, str(error)))
        except DuplicateUrnError as error:
            send((_DUPLICATE_URNS, error.urns))
        except SystemExit as exit_:
            send((_EXITED, exit_.code))
        except Exception:  # noqa: BLE001 - a crash in the program (or in writing its records), its traceback sent
            send((_CRASHED, traceback.format_exc()))
        else:
            send((_DONE,))
        pipe.close()
        code = 0
    finally:
        # What the program printed, written out: os._exit flushes nothing.
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
