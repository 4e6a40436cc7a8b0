"""The program evaluated in a forked child (preview/evaluation_process.py): what the parent gets back is what the
program recorded, evaluated in one process; the policy session and the listener hear what they heard in one process;
what the program raises comes back as it was raised; the parent keeps none of the program's objects."""

from __future__ import annotations

import gc
import http
import io
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pulumi
import pytest

from preview import engine
from preview.cpu_split import cpu_split, current_cpu
from preview.evaluation_process import _RESOURCE, ProgramCrashed, _relay, evaluate_apart
from preview.policy_session import PolicySession
from preview.stack_config import StackConfig

from .helpers import ROOT, run_preview

# A provider, a component with outputs, custom resources under both, a plain stack output and one that is an Output.
PROGRAM = """
import pulumi


class Box(pulumi.ComponentResource):
    def __init__(self, name, provider):
        super().__init__("test:index:Box", name)
        opts = pulumi.ResourceOptions(parent=self, provider=provider)
        body = {"metadata": {"name": name}, "data": {"a": "b"}}
        self.thing = pulumi.CustomResource("kubernetes:core/v1:ConfigMap", f"{name}-map", body, opts)
        self.register_outputs({"size": 2, "name": self.thing.urn})


provider = pulumi.ProviderResource("kubernetes", "cluster", {"kubeconfig": "{}"})
boxes = [Box(f"box-{i}", provider) for i in range(3)]
pulumi.CustomResource("aws:iam/role:Role", "role", {"name": "reader"})
pulumi.export("table", {"servers": [{"name": "a", "replicas": 2}]})
pulumi.export("urn", boxes[0].thing.urn)
"""


class _Session(PolicySession):
    """The real session's requests, built in the child as the preview builds them (`requests_for`); what the parent is
    handed (`forward`) kept rather than sent to a pack."""

    def __init__(self) -> None:
        self._providers: dict[str, bytes] = {}
        self.forwarded: list[tuple[str, bytes, bytes]] = []
        self.children_at_start: list[int] | None = None

    def start(self) -> None:
        self.children_at_start = _children()

    def forward(self, urn: str, request: bytes, entry: bytes) -> None:
        self.forwarded.append((urn, request, entry))


def _children() -> list[int]:
    return [int(pid) for task in Path(f"/proc/{os.getpid()}/task").iterdir() for pid in (task / "children").read_text().split()]


def _program(tmp_path: Path, source: str = PROGRAM) -> Path:
    (tmp_path / "__main__.py").write_text(source)
    return tmp_path


CONFIG = StackConfig(project="apart-test", stack="dev")


def test_the_parent_gets_what_the_program_recorded_and_hears_what_one_process_hears(tmp_path: Path) -> None:
    program = _program(tmp_path)
    alone, heard_alone = _Session(), []
    expected = engine.evaluate(program, CONFIG, listener=alone.submit, exported=lambda n, v: heard_alone.append((n, v)))
    apart, heard = _Session(), []
    evaluation = evaluate_apart(program, CONFIG, apart, lambda name, value: heard.append((name, value)))
    assert evaluation.resources == expected.resources and evaluation.stack_outputs == expected.stack_outputs
    assert [r.type for r in evaluation.resources].count("kubernetes:core/v1:ConfigMap") == 3
    # Each custom resource's requests, byte for byte (the registration threads' order varies: compared as sets).
    assert sorted(apart.forwarded) == sorted(alone.forwarded) and len(apart.forwarded) == 4
    # The plain table is told as exported; the Output, which a pipe cannot carry, is not.
    assert heard == [("table", {"servers": [{"name": "a", "replicas": 2}]})]
    assert [name for name, _ in heard_alone] == ["table", "urn"]
    assert evaluation.program_cpu_seconds > 0
    # The session's exchange (its thread, which imports as it goes) started once the child was forked.
    assert apart.children_at_start


# Stack outputs that are not plain data: a resource object, classes of the program's own (which the parent cannot
# import), an enum member the parent can import.
ODD_OUTPUTS = """
import dataclasses
import enum
import http
import pulumi


@dataclasses.dataclass
class Row:
    name: str


class Tier(enum.Enum):
    PREMIUM = "premium"


role = pulumi.CustomResource("aws:iam/role:Role", "role", {"name": "reader"})
pulumi.export("role", role)
pulumi.export("rows", {"servers": [Row("a")]})
pulumi.export("tier", Tier.PREMIUM)
pulumi.export("status", http.HTTPStatus.OK)
pulumi.export("plain", {"servers": [{"name": "a"}]})
"""


def test_stack_outputs_that_are_not_plain_data_come_back_as_report_json_shows_them(tmp_path: Path) -> None:
    program = _program(tmp_path, ODD_OUTPUTS)
    heard: list[tuple[str, Any]] = []
    evaluation = evaluate_apart(program, CONFIG, _Session(), lambda name, value: heard.append((name, value)))
    expected = engine.evaluate(program, CONFIG).stack_outputs
    shown = {name: json.loads(json.dumps(value, default=str)) for name, value in expected.items()}
    # The resource object and the program's own classes as report.json writes them (a resource's text names its address,
    # which differs between the two processes); the importable enum member as it is.
    assert re.fullmatch(r"<pulumi\.resource\.CustomResource object at 0x[0-9a-f]+>", evaluation.stack_outputs["role"])
    assert re.fullmatch(r"<pulumi\.resource\.CustomResource object at 0x[0-9a-f]+>", shown["role"])
    assert {name: evaluation.stack_outputs[name] for name in ("rows", "tier")} == {name: shown[name] for name in ("rows", "tier")}
    assert evaluation.stack_outputs["status"] is http.HTTPStatus.OK and evaluation.stack_outputs["plain"] == expected["plain"]
    # Only plain tables are told as exported, which is what the listener reads.
    assert heard == [("plain", {"servers": [{"name": "a"}]})]


def test_a_stream_cut_within_a_message_is_the_end_of_the_child() -> None:
    cut = pickle.dumps((_RESOURCE, "urn:a", b"x" * 100_000, b"y"), protocol=pickle.HIGHEST_PROTOCOL)[:-7]
    assert _relay(io.BytesIO(cut), _Session(), lambda name, value: None) is None


def test_a_program_that_exits_makes_the_preview_exit_so(tmp_path: Path) -> None:
    program = _program(tmp_path, "import sys\nsys.exit('stopped by the program')\n")
    with pytest.raises(SystemExit) as exited:
        evaluate_apart(program, CONFIG, _Session(), lambda name, value: None)
    assert exited.value.code == "stopped by the program"


def test_the_parent_keeps_none_of_the_programs_objects(tmp_path: Path) -> None:
    program = _program(tmp_path)
    gc.collect()
    before = sum(isinstance(o, pulumi.Resource) for o in gc.get_objects())
    evaluate_apart(program, CONFIG, _Session(), lambda name, value: None)
    gc.collect()
    assert sum(isinstance(o, pulumi.Resource) for o in gc.get_objects()) == before
    # In one process the program's resources outlive the evaluation (the SDK's settings and futures hold them).
    kept = engine.evaluate(program, CONFIG)
    assert sum(isinstance(o, pulumi.Resource) for o in gc.get_objects()) > before and kept.resources


def test_what_the_program_raises_comes_back_as_raised(tmp_path: Path) -> None:
    crash = tmp_path / "crash"
    crash.mkdir()
    _program(crash, "raise ValueError('boom')\n")
    with pytest.raises(ProgramCrashed) as crashed:
        evaluate_apart(crash, CONFIG, _Session(), lambda name, value: None)
    assert "ValueError: boom" in crashed.value.trace and "__main__.py" in crashed.value.trace
    config_error = tmp_path / "config"
    config_error.mkdir()
    _program(config_error, "import pulumi\nraise pulumi.RunError('the stack config is wrong: key x')\n")
    with pytest.raises(pulumi.RunError, match="the stack config is wrong: key x"):
        evaluate_apart(config_error, CONFIG, _Session(), lambda name, value: None)


def test_a_child_that_dies_without_a_word_is_a_crash_that_says_so(tmp_path: Path) -> None:
    program = _program(tmp_path, "import os\nos.kill(os.getpid(), 9)\n")
    with pytest.raises(ProgramCrashed, match="ended \\(signal 9\\) without a result"):
        evaluate_apart(program, CONFIG, _Session(), lambda name, value: None)


def test_a_parent_that_stops_early_takes_the_child_with_it(tmp_path: Path) -> None:
    program = _program(tmp_path)
    children: list[int] = []

    def failing(name: str, value: Any) -> None:
        children.extend(_children())
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        evaluate_apart(program, CONFIG, _Session(), failing)
    assert children and not any(Path(f"/proc/{pid}").exists() for pid in children)


# A program that exports the CPUs its process may run on.
OWN_CPUS = """
import os
import pulumi

pulumi.CustomResource("aws:iam/role:Role", "role", {"name": "reader"})
pulumi.export("cpus", sorted(os.sched_getaffinity(0)))
"""


def _threads_cpus(pid: int) -> set[frozenset[int]]:
    """The CPU sets of every thread of process `pid`."""
    return {frozenset(os.sched_getaffinity(int(thread))) for thread in os.listdir(f"/proc/{pid}/task")}


def test_the_program_has_a_cpu_of_its_own_while_it_runs_and_every_process_gets_every_cpu_back(tmp_path: Path) -> None:
    """While the program runs: its process on one CPU, this process (every thread of it) and its other children (here
    a stand-in for the pack, which runs on one CPU of its own choosing) on the others; after, each back on the CPUs it
    had. With one CPU, nothing pinned."""
    allowed = frozenset(os.sched_getaffinity(0))
    own = frozenset({max(allowed)})
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    os.sched_setaffinity(helper.pid, own)
    seen: dict[str, Any] = {}

    def exported(name: str, value: Any) -> None:
        seen.update(program=frozenset(value), preview=_threads_cpus(os.getpid()), helper=_threads_cpus(helper.pid))

    try:
        evaluation = evaluate_apart(_program(tmp_path, OWN_CPUS), CONFIG, _Session(), exported)
        after = (_threads_cpus(os.getpid()), _threads_cpus(helper.pid))
    finally:
        helper.kill()
        helper.wait()
    assert evaluation.stack_outputs["cpus"] == sorted(seen["program"])
    if len(allowed) < 2:
        assert seen["program"] == allowed and seen["preview"] == {allowed} and seen["helper"] == {own}
    else:
        (program,) = seen["program"]
        assert seen["preview"] == seen["helper"] == {allowed - {program}}
    assert after == ({allowed}, {own})


def test_the_program_gets_the_cpu_the_preview_runs_on_and_the_rest_the_others() -> None:
    assert cpu_split({0, 1}, 1) == (frozenset({0, 1}), frozenset({1}), frozenset({0}))
    assert cpu_split({0, 1, 2, 3}, 2) == (frozenset({0, 1, 2, 3}), frozenset({2}), frozenset({0, 1, 3}))
    # Where the current CPU is unknown (or not allowed: a mask changed meanwhile), the lowest-numbered allowed one.
    assert cpu_split({5, 2, 9}, None) == (frozenset({2, 5, 9}), frozenset({2}), frozenset({5, 9}))
    assert cpu_split({5, 2, 9}, 7) == cpu_split({5, 2, 9}, None)
    assert cpu_split({3}, 3) is None and cpu_split(set(), None) is None
    assert current_cpu() in os.sched_getaffinity(0)


def _project(tmp_path: Path, name: str, program: str) -> Path:
    """A project of one stack, `test`, with no config, whose program is `program`."""
    project = tmp_path / "project"
    (project / "stacks").mkdir(parents=True)
    (project / "Pulumi.yaml").write_text(f"name: {name}\nruntime: python\nstackConfigDir: stacks\n")
    (project / "stacks" / "Pulumi.test.yaml").write_text("config: {}\n")
    (project / "__main__.py").write_text(program)
    return project


def test_what_the_program_prints_is_written_out(tmp_path: Path) -> None:
    """The child's buffered output is flushed before it exits (os._exit flushes nothing): with stdout a pipe, and not
    unbuffered, a line the program prints reaches the user."""
    project = _project(tmp_path, "printing", "print('made by the program')\n")
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    arguments = ["--project-dir", str(project), "--stack", "test", "--policy-pack", str(ROOT / "policies")]
    result = subprocess.run(
        [sys.executable, "-m", "preview", "--quiet", *arguments, "--out", str(tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env=environment,
    )
    assert result.returncode == 0, result.stderr
    assert "made by the program" in result.stdout


def test_a_crashing_program_is_reported_with_its_traceback_and_exit_code_3(tmp_path: Path) -> None:
    project = _project(tmp_path, "crashing", "def build():\n    raise ValueError('boom')\n\n\nbuild()\n")
    result = run_preview(
        "--project-dir", str(project), "--stack", "test", "--policy-pack", str(ROOT / "policies"), "--out", str(tmp_path / "out")
    )
    assert result.returncode == 3, result.stderr
    assert "Traceback" in result.stderr and "in build" in result.stderr and "ValueError: boom" in result.stderr
    assert result.stderr.rstrip().endswith("error: the program crashed (a bug, not a config problem)")
