"""The pull-request workflow's preview commands, run as the workflow runs them on two commits: the default
branch's checkout (`trusted/`) previewed as the baseline, then the pull request's, against it, with the default
branch's policy pack. Its report.md, the pull request's comment, opens with what the change does: the changed
inputs with their old and new values, what is replaced, and the cost before and after; the rest is collapsed;
no path of the machine it ran on appears in it."""

from __future__ import annotations

import io
import os
import re
import subprocess
import tarfile
from pathlib import Path

import yaml

from .helpers import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "preview.yml"
STACK = "prod"


def _checkout(commit: str, where: Path) -> None:
    """`actions/checkout` of a commit: its tree as git has it, nothing the working copy holds besides."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True).stdout
    where.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(where, filter="data")


def _installed(checkout: Path) -> None:
    """What `make` would install or download on first use, taken from this checkout: the virtualenvs and the
    upstream source releases (installing them here would need the network)."""
    (checkout / ".venv").symlink_to(ROOT / ".venv")
    (checkout / "policies" / "venv").symlink_to(ROOT / "policies" / "venv")
    (checkout / ".venv-perf").symlink_to(ROOT / ".venv-perf")
    (checkout / "build").mkdir(exist_ok=True)
    (checkout / "build" / "upstream-sources").symlink_to(ROOT / "build" / "upstream-sources")


def _preview_steps() -> list[str]:
    """The offline-preview job's two preview commands, in order (the baseline's, then the pull request's)."""
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["offline-preview"]["steps"]
    runs = [step["run"] for step in steps if "run" in step and "preview" in step["run"]]
    assert len(runs) == 2, runs
    return runs


def _as_the_runner_would(command: str, workspace: Path) -> list[list[str]]:
    """A step's commands (joined by `&&`) with the workflow's expressions evaluated for the prod stack, the baseline's
    preview having written its resources.json (so hashFiles(...) is not empty), and make told not to remake what
    `_installed` took from this checkout."""
    baseline_expression = re.search(r"\$\{\{ hashFiles\(.*?\}\}", command)
    if baseline_expression is not None:
        assert (workspace / "build" / "baseline" / STACK / "resources.json").is_file()
        command = command.replace(baseline_expression.group(0), f"BASELINE=build/baseline/{STACK}")
    command = command.replace("${{ matrix.stack }}", STACK).replace("${{ github.workspace }}", str(workspace))
    assert "${{" not in command, command
    commands = []
    for part in command.split("&&"):
        words = part.split()
        if words[:2] == ["rm", "-rf"]:
            commands.append(words)
            continue
        assert words[0] == "make", words
        stamps = [".venv/.installed", "policies/venv/.installed", "trusted/policies/venv/.installed", ".venv-perf/.installed"]
        stamps += [".venv-perf/performance-warm.json", "build/.bytecode"]
        commands.append(["make", *(f"-o{stamp}" for stamp in stamps), *words[1:]])
    return commands


def _workspace(tmp_path: Path) -> Path:
    """The runner's workspace: the pull request's checkout, and the default branch's in `trusted/`, both of HEAD."""
    workspace = tmp_path / "workspace"
    _checkout("HEAD", workspace)
    _checkout("HEAD", workspace / "trusted")
    for checkout in (workspace, workspace / "trusted"):
        _installed(checkout)
        # The layout the project runs in: ../shared beside each checkout (the workflow checks the CRD catalog out
        # instead; its copy in ../shared stands in for it).
        (checkout.parent / "shared").symlink_to((ROOT.parent / "shared").resolve())
    return workspace


def _run_steps(workspace: Path, tmp_path: Path) -> list[subprocess.CompletedProcess[str]]:
    """Each preview step, its commands in turn as the shell runs `a && b` (the step's last command's result)."""
    env = {**os.environ, "CRD_SCHEMA_DIR": str(tmp_path / "shared" / "crd-schemas")}
    env.pop("PYTHONPATH", None)
    results = []
    for command in _preview_steps():
        for argv in _as_the_runner_would(command, workspace):
            run = subprocess.run(argv, cwd=workspace, env=env, capture_output=True, text=True, timeout=300)
            if run.returncode != 0:
                break
        results.append(run)
    return results


def test_the_pull_request_workflow_shows_the_change_against_the_default_branch(tmp_path: Path) -> None:
    workspace = _workspace(tmp_path)
    # The pull request's commit: one model's maximum lowered, and the H100 pool's price raised.
    stack_file = workspace / "stacks" / f"Pulumi.{STACK}.yaml"
    text = stack_file.read_text()
    assert text.count("pricePerHour: 55.04") == 1 and text.count("maxReplicas: 6\n") == 1
    changed = text.replace("pricePerHour: 55.04", "pricePerHour: 60.00").replace("maxReplicas: 6\n", "maxReplicas: 5\n")
    stack_file.write_text(changed)
    for run in _run_steps(workspace, tmp_path):
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    report = (workspace / "build" / "preview" / STACK / "report.md").read_text()
    top, collapsed = report.split("<details>", 1)
    # The HPA, and the 1B's Deployment, whose serving shape (its replicas among what the performance stage judges)
    # is new: its metadata, not its pods.
    assert "2 to change in place, 1 to replace, 0 to delete" in top
    assert "| update | `llama-1b-v1-deployment` (Deployment) | `metadata.annotations.inference.platform/serving-shape`" in top
    assert "| update | `llama-1b-v1-hpa` (HorizontalPodAutoscaler) | `spec.maxReplicas`: `6` → `5` |" in top
    # The dashboard's cost panel multiplies by the price: a ConfigMap, which pulumi-kubernetes replaces.
    assert "| replace | `platform-overview-config-map` (ConfigMap) |" in top and "* 60 or sum" in top
    # Two to nine p5 nodes at 4.96 more an hour; the system node group (3 to 12 m6i.2xlarge at the 0.384 list price)
    # unchanged.
    assert "| environment | 113.53 → 123.45 | 509.17 → 553.81 |" in top
    assert "## Resources by kind" in collapsed and collapsed.rstrip().endswith("</details>")
    assert str(tmp_path) not in report and "/work/" not in report and "/tmp/" not in report


def test_a_pull_request_whose_stack_file_is_refused_still_gets_a_comment_saying_why(tmp_path: Path) -> None:
    workspace = _workspace(tmp_path)
    stack_file = workspace / "stacks" / f"Pulumi.{STACK}.yaml"
    stack_file.write_text(stack_file.read_text().replace("maxReplicas: 6\n", "maxReplicas: -6\n"))
    baseline, pull_request = _run_steps(workspace, tmp_path)
    assert baseline.returncode == 0, baseline.stderr[-3000:]
    assert pull_request.returncode == 2 and "Traceback" not in pull_request.stderr
    report = (workspace / "build" / "preview" / STACK / "report.md").read_text()
    assert "**Result: config error**" in report and "maxReplicas: must be greater than 0 (got -6)" in report
    assert sorted(p.name for p in (workspace / "build" / "preview" / STACK).iterdir()) == ["report.json", "report.md"]
