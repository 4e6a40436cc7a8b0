"""Hostile and mistaken input: every case is refused with exit 2 and a message naming the key,
never a crash, a hang or a silent 'clean'.

Three tables, each run through the code the CLI runs: stack files as text (the CLI's `main`
in-process: it returns before starting anything), config values (the stack file as the CLI reads
it, then the program under the mock engine, which raises the `pulumi.RunError` the CLI turns into
exit 2; the values in tests/hostile_cases.py and tests/hostile_rule_cases.py) and command-line
inputs (`main` in-process). The cases that used to crash or hang run once more through the real
CLI, in parallel, under a memory limit and a timeout.
"""

from __future__ import annotations

import copy
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pulumi
import pytest
import yaml

from platform_config.models import EKS_NODES_PER_NODE_GROUP

from .helpers import PROJECT, ROOT, raw_stack
from .hostile_cases import BOUND_CASES
from .hostile_rule_cases import RULE_CASES


def _doc(config: str) -> str:
    """A stack file whose `config:` block is `config` (indented by the caller's 2 spaces)."""
    return "config:\n" + config


def _laughs(levels: int) -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 9) + "]")
    return "\n".join(lines) + f"\nconfig:\n  {PROJECT}:models: *a{levels - 1}\n"


def _deep_block(levels: int) -> str:
    text = "config:\n  inference-platform:profiles:\n"
    for level in range(levels):
        text += "  " * (level + 2) + f"k{level}:\n"
    return text + "  " * (levels + 2) + "end: 1\n"


# (id, stack file text or bytes, what the message must name)
TEXT_CASES: list[tuple[str, str | bytes, str]] = [
    ("file-is-a-list", "- config\n- models\n", "holds a list"),
    ("file-is-a-string", "just some text\n", "holds a string"),
    ("file-is-a-number", "42\n", "holds a number"),
    ("file-is-true", "true\n", "holds true/false"),
    ("config-is-a-list", "config:\n  - a\n", "config: must be a mapping"),
    ("config-is-a-string", "config: models\n", "config: must be a mapping"),
    ("integer-key", _doc("  1: x\n"), "key '1' is not a string"),
    ("integer-key-nested", _doc(f"  {PROJECT}:profiles:\n    5: {{}}\n"), f"{PROJECT}:profiles (line 3): key '5'"),
    ("boolean-key", _doc(f"  {PROJECT}:profiles:\n    true: {{}}\n"), f"{PROJECT}:profiles (line 3): key 'true'"),
    ("null-key", _doc(f"  {PROJECT}:traffic:\n    ~: 1\n"), f"{PROJECT}:traffic (line 3): key '~'"),
    ("float-key", _doc(f"  {PROJECT}:traffic:\n    1.5: 1\n"), f"{PROJECT}:traffic (line 3): key '1.5'"),
    ("list-key", _doc(f"  {PROJECT}:traffic:\n    ? [a, b]\n    : 1\n"), f"{PROJECT}:traffic (line 3): a key must be"),
    ("mapping-key", _doc(f"  {PROJECT}:traffic:\n    ? {{a: b}}\n    : 1\n"), f"{PROJECT}:traffic (line 3): a key must be"),
    ("not-utf8", b"config:\n  inference-platform:environment: \xff\xfeprod\n", "line 2: the file is not UTF-8"),
    ("latin1-name", "config:\n  inference-platform:environment: d\xe9v\n".encode("latin-1"), "line 2: the file is not UTF-8"),
    ("utf16", "config: {}\n".encode("utf-16"), "line 1: the file is not UTF-8"),
    ("recursive-alias-list", _doc(f"  {PROJECT}:models: &loop [*loop]\n"), f"{PROJECT}:models[0] (line 2): alias *loop"),
    ("recursive-alias-map", _doc(f"  {PROJECT}:traffic: &loop\n    tiers: *loop\n"), f"{PROJECT}:traffic.tiers (line 3)"),
    (
        "recursive-alias-deep",
        _doc(f"  {PROJECT}:models: &m\n    - versions:\n        - *m\n"),
        f"{PROJECT}:models[0].versions[0]",
    ),
    ("undefined-alias", _doc(f"  {PROJECT}:models: *nowhere\n"), f"{PROJECT}:models (line 2): alias *nowhere names no anchor"),
    ("deep-brackets", _doc(f"  {PROJECT}:models: " + "[" * 100_000 + "]" * 100_000 + "\n"), "nested more than 32"),
    ("deep-braces", _doc(f"  {PROJECT}:traffic: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n"), f"{PROJECT}:traffic.a.a"),
    ("deep-block-mapping", _deep_block(40), f"{PROJECT}:profiles.k0.k1"),
    (
        "binary-tag",
        _doc(f"  {PROJECT}:environment: !!binary cHJvZHVjdGlvbg==\n"),
        f"{PROJECT}:environment (line 2): tag !!binary",
    ),
    ("set-tag", _doc(f"  {PROJECT}:tenants: !!set {{a, b}}\n"), f"{PROJECT}:tenants (line 2): tag !!set"),
    (
        "timestamp-tag",
        _doc(f"  {PROJECT}:environment: !!timestamp 2026-01-01\n"),
        f"{PROJECT}:environment (line 2): tag !!timestamp",
    ),
    ("omap-tag", _doc(f"  {PROJECT}:traffic: !!omap [a: 1]\n"), f"{PROJECT}:traffic (line 2): tag !!omap"),
    ("pairs-tag", _doc(f"  {PROJECT}:traffic: !!pairs [a: 1]\n"), f"{PROJECT}:traffic (line 2): tag !!pairs"),
    ("python-tag", _doc(f"  {PROJECT}:environment: !!python/name:os.system x\n"), f"{PROJECT}:environment (line 2)"),
    ("local-tag", _doc(f"  {PROJECT}:environment: !vault production\n"), f"{PROJECT}:environment (line 2): tag !vault"),
    ("local-tag-on-mapping", _doc(f"  {PROJECT}:traffic: !secret {{a: 1}}\n"), f"{PROJECT}:traffic (line 2): tag !secret"),
    (
        "duplicate-top-key",
        _doc(f"  {PROJECT}:environment: development\n  {PROJECT}:environment: production\n"),
        f"{PROJECT}:environment (line 3): duplicate key",
    ),
    (
        "duplicate-canary-weight",
        _doc(f"  {PROJECT}:models:\n    - release:\n        canary: v2\n        canaryWeight: 10\n        canaryWeight: 100\n"),
        f"{PROJECT}:models[0].release.canaryWeight (line 6): duplicate key",
    ),
    ("duplicate-config", "config: {}\nconfig: {}\n", "config (line 2): duplicate key 'config'"),
    (
        "duplicate-in-flow-mapping",
        _doc(f"  {PROJECT}:traffic: {{defaultTier: batch, defaultTier: premium}}\n"),
        f"{PROJECT}:traffic.defaultTier (line 2): duplicate key",
    ),
    ("duplicate-quoted-and-plain", _doc(f"  {PROJECT}:traffic: {{a: 1, 'a': 2}}\n"), f"{PROJECT}:traffic.a (line 2)"),
    ("billion-laughs", _laughs(9), "aliases expanded"),
    (
        "wide-aliases",
        "big: &big [" + ", ".join(["x"] * 5000) + "]\nconfig:\n  x: [" + ", ".join(["*big"] * 50) + "]\n",
        "x[18] (line 3)",
    ),
    ("merge-key-laughs", _laughs(5).replace("config:", "x: {<<: {y: *a4}}\nconfig:"), "x.<<.y"),
    ("huge-integer", _doc(f"  {PROJECT}:nodePools: [{{maxSize: {'9' * 5000}}}]\n"), f"{PROJECT}:nodePools[0].maxSize (line 2)"),
    ("huge-float", _doc(f"  {PROJECT}:capacity: {{overcommitRatio: 1.{'0' * 5000}}}\n"), f"{PROJECT}:capacity.overcommitRatio"),
    ("two-documents", "config: {}\n---\nconfig: {}\n", "more than one YAML document"),
    ("over-the-size-bound", "# " + "x" * (1 << 20) + "\nconfig: {}\n", "larger than 1048576 bytes"),
    ("unclosed-bracket", _doc(f"  {PROJECT}:models: [a, b\n"), "not valid YAML"),
    ("tab-indentation", "config:\n\tinference-platform:environment: production\n", "not valid YAML"),
    ("nul-byte", "config:\n  a: b\x00c\n", "not valid YAML"),
    ("merge-of-a-scalar", _doc("  x:\n    <<: 5\n"), "not valid YAML"),
    ("bad-indentation", "config:\n  a: 1\n b: 2\n", "not valid YAML"),
]

# (id, stack, mutation of its project config, the key the message must name)
VALUE_CASES = [*BOUND_CASES, *RULE_CASES]


def _policy_config(text: str | bytes) -> Callable[[Path], list[str]]:
    def arguments(tmp_path: Path) -> list[str]:
        path = tmp_path / "policy.json"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return ["--stack", "dev", "--policy-config", str(path)]

    return arguments


def _previous_outputs(text: str) -> Callable[[Path], list[str]]:
    def arguments(tmp_path: Path) -> list[str]:
        path = tmp_path / "outputs.json"
        path.write_text(text)
        return ["--stack", "dev", "--previous-outputs", str(path)]

    return arguments


def _baseline(text: str | None) -> Callable[[Path], list[str]]:
    def arguments(tmp_path: Path) -> list[str]:
        folder = tmp_path / "baseline"
        folder.mkdir()
        if text is not None:
            (folder / "resources.json").write_text(text)
        return ["--stack", "dev", "--baseline", str(folder)]

    return arguments


def _out_is_a_file(tmp_path: Path) -> list[str]:
    (tmp_path / "taken").write_text("")
    return ["--stack", "dev", "--out", str(tmp_path / "taken")]


def _fifo(tmp_path: Path) -> list[str]:
    """A named pipe nobody writes to: opening it would block for ever."""
    os.mkfifo(tmp_path / "pipe.yaml")
    return ["--stack", "test", "--config-file", str(tmp_path / "pipe.yaml")]


def _missing_stack_file(tmp_path: Path) -> list[str]:
    return ["--stack", "test", "--config-file", str(tmp_path / "nothing.yaml")]


RESOURCE = {"urn": "urn:pulumi:s::p::t::n", "type": "t", "name": "n", "inputs": {}}

# (id, the command-line arguments it builds in a folder of its own, what the message must name)
CLI_CASES: list[tuple[str, Callable[[Path], list[str]], str]] = [
    ("stack-name-a-path", lambda _: ["--stack", "../../../tmp/x"], "--stack '../../../tmp/x' is not a stack name"),
    ("stack-name-empty", lambda _: ["--stack", ""], "--stack '' is not a stack name"),
    ("stack-name-newline", lambda _: ["--stack", "dev\n"], "is not a stack name"),
    ("out-is-a-file", _out_is_a_file, "is a file, not a folder"),
    ("missing-stack-file", _missing_stack_file, "no stack file"),
    ("policy-config-not-json", _policy_config("all: advisory"), "cannot read the policy config"),
    ("policy-config-a-list", _policy_config('["all"]'), "the policy config must be"),
    ("policy-config-a-string", _policy_config('"advisory"'), "the policy config must be"),
    ("policy-config-not-utf8", _policy_config(b'{"all": "\xff"}'), "cannot read the policy config"),
    ("policy-config-deep", _policy_config("[" * 100_000 + "]" * 100_000), "cannot read the policy config"),
    ("policy-config-bad-level", _policy_config('{"all": "sometimes"}'), "policy config 'all'"),
    ("policy-config-a-number", _policy_config('{"all": 3}'), "policy config 'all'"),
    ("baseline-an-object", _baseline('{"resources": []}'), "resources.json holds dict, not a list"),
    ("baseline-strings", _baseline('["urn:a"]'), "resources.json[0] is not a resource"),
    ("baseline-no-urn", _baseline(json.dumps([{"type": "t", "name": "n", "inputs": {}}])), "resources.json[0] is not a resource"),
    ("baseline-inputs-a-list", _baseline(json.dumps([{**RESOURCE, "inputs": []}])), "resources.json[0].inputs is not a mapping"),
    ("baseline-not-json", _baseline("{"), "cannot read the baseline"),
    ("previous-outputs-not-json", _previous_outputs("{"), "cannot read the previous outputs"),
    ("previous-outputs-a-list", _previous_outputs("[]"), "holds list, not the stack's outputs"),
    ("previous-posture-a-string", _previous_outputs('{"securityPosture": "open"}'), "securityPosture is str, not a mapping"),
    (
        "previous-posture-models-a-list",
        _previous_outputs('{"securityPosture": {"models": ["llama-1b"]}}'),
        "securityPosture.models: is list, not a mapping of models",
    ),
    (
        "previous-posture-production-a-string",
        _previous_outputs('{"securityPosture": {"production": "no"}}'),
        "securityPosture.production: is str, not true or false",
    ),
    ("baseline-missing", _baseline(None), "the baseline: cannot read"),
    (
        "stack-file-a-device",
        lambda _: ["--stack", "test", "--config-file", "/dev/zero"],
        "cannot read /dev/zero: not a regular file",
    ),
    ("stack-file-a-folder", lambda tmp_path: ["--stack", "test", "--config-file", str(tmp_path)], "not a regular file"),
    ("stack-file-a-fifo", _fifo, "not a regular file"),
    (
        "policy-config-a-device",
        lambda _: ["--stack", "dev", "--policy-config", "/dev/zero"],
        "the policy config: cannot read /dev/zero: not a regular file",
    ),
]


def test_at_least_a_hundred_cases():
    assert len(TEXT_CASES) + len(VALUE_CASES) + len(CLI_CASES) >= 100


def _main(arguments: list[str], capsys) -> tuple[int, str]:
    from preview.cli import main

    code = main(["--quiet", *arguments])
    return code, capsys.readouterr().err


def _refused(code: int, stderr: str, key: str) -> None:
    assert code == 2, stderr
    assert key in stderr, stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize("case, text, key", TEXT_CASES, ids=[c[0] for c in TEXT_CASES])
def test_hostile_stack_file(tmp_path, capsys, case: str, text: str | bytes, key: str):
    stack = tmp_path / "Pulumi.test.yaml"
    stack.write_bytes(text if isinstance(text, bytes) else text.encode())
    out = tmp_path / "out"
    code, stderr = _main(["--stack", "test", "--config-file", str(stack), "--out", str(out)], capsys)
    _refused(code, stderr, key)
    assert not out.exists()


def _stack_text(stack: str, mutate: Callable[[dict[str, Any]], None]) -> str:
    raw = copy.deepcopy(raw_stack(stack))
    mutate(raw)
    return yaml.safe_dump({"config": {f"{PROJECT}:{key}": value for key, value in raw.items()}}, sort_keys=False)


@pytest.mark.parametrize("case, stack, mutate, key", VALUE_CASES, ids=[c[0] for c in VALUE_CASES])
def test_mistaken_config_value(tmp_path, case: str, stack: str, mutate: Callable[[dict[str, Any]], None], key: str):
    """The stack file read as the CLI reads it, then the program run under the mock engine: the
    `pulumi.RunError` it raises is what the CLI reports with exit 2 (test_refused_through_the_cli)."""
    from platform_config.errors import ConfigError
    from preview.engine import evaluate
    from preview.stack_config import load_project, load_stack_config

    path = tmp_path / "Pulumi.test.yaml"
    path.write_text(_stack_text(stack, mutate))
    config = load_stack_config(load_project(ROOT), "test", path)
    with pytest.raises(pulumi.RunError) as refused:
        evaluate(ROOT, config)
    assert isinstance(refused.value, ConfigError)
    issues = [str(issue) for issue in refused.value.issues]
    full_key = key if key.startswith(f"{PROJECT}:") else f"{PROJECT}:{key}"
    assert any(issue.startswith(full_key + ":") for issue in issues), issues


@pytest.mark.parametrize("case, arguments, key", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_hostile_command_line(tmp_path, capsys, case: str, arguments: Callable[[Path], list[str]], key: str):
    argv = arguments(tmp_path)
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "out")]
    code, stderr = _main(argv, capsys)
    _refused(code, stderr, key)


def test_pydantic_patterns_do_not_end_before_a_trailing_newline():
    """Field(pattern=...) runs in pydantic-core's Rust regex engine, where `$` is the end of the
    text: pinned here because Python's `re` would let 'name\\n' through."""
    from pydantic import ValidationError

    from platform_config.models import MigGeometry

    with pytest.raises(ValidationError):
        MigGeometry.model_validate({"name": "mix\n", "devices": [{"gpus": 1}]})
    assert MigGeometry.model_validate({"name": "mix", "devices": [{"gpus": 1}]}).name == "mix"


# The cases that crashed or hung before, once more through the real CLI, with a stack at every size
# bound the config allows: each a process of its own with a memory limit and 30 s of CPU (the
# kernel stops it past that: a bound on the work, whatever else the machine runs), all at once.
CLI_SUBSET = {
    "file-is-a-list",
    "integer-key",
    "not-utf8",
    "recursive-alias-list",
    "deep-brackets",
    "binary-tag",
    "set-tag",
    "timestamp-tag",
    "billion-laughs",
    "duplicate-canary-weight",
    "huge-integer",
}
VALUE_SUBSET = {
    "mig-count-10e12",
    "stable-a-list-with-weights",
    "server-names-collide-across-tenants",
    "huggingface-non-ascii",
}
MEMORY_LIMIT = 1 << 30
# A whole preview's address space: the SDK's and gRPC's threads each reserve their stacks and arenas.
PREVIEW_MEMORY_LIMIT = 4 << 30
CPU_SECONDS = 30
TIMEOUT_SECONDS = 60


def _limits(memory: int) -> Callable[[], None]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))

    return limit


def _at_every_bound(raw: dict[str, Any]) -> None:
    """Every node group, the system one included, at EKS's quota of nodes."""
    for pool in raw["nodePools"]:
        pool["maxSize"] = EKS_NODES_PER_NODE_GROUP
    raw["cluster"]["eks"]["systemNodeGroup"] = {
        **raw["cluster"]["eks"].get("systemNodeGroup", {}),
        "maxSize": EKS_NODES_PER_NODE_GROUP,
    }


def test_refused_through_the_cli(tmp_path):
    stacks: list[tuple[str, bytes, str]] = [
        (case, text if isinstance(text, bytes) else text.encode(), key) for case, text, key in TEXT_CASES if case in CLI_SUBSET
    ]
    stacks += [
        (case, _stack_text(stack, mutate).encode(), key) for case, stack, mutate, key in VALUE_CASES if case in VALUE_SUBSET
    ]
    assert len(stacks) == len(CLI_SUBSET) + len(VALUE_SUBSET)
    # Accepted, and previewed clean: exit 0, no key to name.
    stacks.append(("at-every-bound", _stack_text("prod", _at_every_bound).encode(), ""))
    running = []
    for case, text, key in stacks:
        path = tmp_path / f"{case}.yaml"
        path.write_bytes(text)
        command = [sys.executable, "-m", "preview", "--quiet", "--stack", "test", "--config-file", str(path)]
        command += ["--out", str(tmp_path / case)]
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_limits(MEMORY_LIMIT if key else PREVIEW_MEMORY_LIMIT),
        )
        running.append((case, key, process))
    failures = []
    for case, key, process in running:
        try:
            _, stderr = process.communicate(timeout=TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            failures.append(f"{case}: no answer within {TIMEOUT_SECONDS} s")
            continue
        expected = 2 if key else 0
        if process.returncode != expected or key not in stderr or "Traceback" in stderr:
            failures.append(f"{case}: exit {process.returncode}: {stderr[-400:]}")
    assert failures == []


def test_a_python_without_the_requirements_is_told_how_to_run_the_preview():
    """`python -m preview` with an interpreter that lacks the pinned packages (here: no site
    packages at all) says what to run instead, with exit 2 and no traceback."""
    result = subprocess.run(
        [sys.executable, "-S", "-m", "preview", "--stack", "dev"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "run `make preview`" in result.stderr


def test_closing_the_packs_channel_never_hangs(monkeypatch):
    """Closing the channel waits for its calls' threads; a preview that crashed for want of threads would
    wait for ever (seen under a 1 GiB address-space limit: grpc Channel._close in Condition.wait), so the
    wait is bounded and the process ends after it."""
    import threading

    from preview import policy_runner

    stuck = threading.Event()

    class StuckChannel:
        def close(self) -> None:
            stuck.wait()

    monkeypatch.setattr(policy_runner, "CHANNEL_CLOSE_SECONDS", 0.05)
    policy_runner.PolicyPack._close_channel(StuckChannel())  # type: ignore[arg-type]
    assert not stuck.is_set()
    stuck.set()
