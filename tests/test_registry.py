"""Versions named in the MLflow model registry, against a real one: resolved at preview into pinned weights,
served, exported and recorded; what it cannot resolve stops the preview with exit 2 naming the key; the lock
file holds what `pulumi up` deploys; a deploy moves the serving aliases.

The registry is a real MLflow tracking server started on loopback once for the module (SQLite, a temporary artifact
folder), its models, versions, tags and aliases registered with MLflow's own client: every test that talks to it is
in this module. What needs no registry, or one MLflow cannot play: tests/test_registry_offline.py."""

from __future__ import annotations

import copy
import json
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from platform_config.errors import ConfigError
from platform_config.loader import parse_platform_config
from platform_config.registry import RECORDING_NAME, recording, resolve_registry
from preview.sections import registry_section

from .conftest import early_mlflow
from .helpers import ROOT, PreviewRun, owning, raw_stack, write_stack
from .registry_helpers import (
    KEY,
    LOCK,
    REPO,
    SERVING_ALIASES,
    SHA_A,
    SHA_B,
    SHA_C,
    manifest,
    pod_template,
    preview,
    refused,
    tool,
    with_registry,
)
from .servers.mlflow import MlflowServer, missing_reason, start_mlflow, wait_until_healthy

# Everything the tests resolve, registered once: name -> [(source, tags, needs a run)], then aliases.
MODELS: dict[str, list[tuple[str, dict[str, str], bool]]] = {
    "chat": [(f"hf://{REPO}@{SHA_A}", {}, False), (f"hf://{REPO}@{SHA_B}", {}, False)],
    "labeller": [("s3://weights-bucket/labeller/3", {}, False)],
    "tagged": [("runs:/{run_id}/model", {"weights": f"hf://{REPO}@{SHA_C}"}, True)],
    "unpinned": [("runs:/{run_id}/model", {}, True), ("hf://Qwen/Qwen2.5@main", {}, False)],
    "pending": [(f"hf://{REPO}@{SHA_A}", {}, False)],
    "mover": [(f"hf://{REPO}@{SHA_A}", {}, False), (f"hf://{REPO}@{SHA_B}", {}, False)],
    "locked": [(f"hf://{REPO}@{SHA_A}", {}, False), (f"hf://{REPO}@{SHA_B}", {}, False)],
    "served": [(f"hf://{REPO}@{SHA_A}", {}, False), (f"hf://{REPO}@{SHA_B}", {}, False)],
}
ALIASES = [
    ("chat", "champion", "1"),
    ("chat", "challenger", "2"),
    ("unpinned", "champion", "1"),
    ("unpinned", "branch", "2"),
    ("mover", "champion", "1"),
    ("locked", "champion", "1"),
    ("served", "champion", "1"),
    ("served", "challenger", "2"),
]


@pytest.fixture(scope="module")
def mlflow(request, tmp_path_factory) -> Iterator[MlflowServer]:
    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)
    # The one the suite spawned when it collected this module (conftest), else a new one.
    early = early_mlflow(request.config)
    server = wait_until_healthy(early) if early is not None else start_mlflow(tmp_path_factory.mktemp("mlflow"))
    try:
        operations: list[list[Any]] = []
        for name, versions in MODELS.items():
            operations.append(["model", name])
            operations += [["version", name, source, tags, run] for source, tags, run in versions]
        operations += [["alias", *alias] for alias in ALIASES]
        server.client(*operations)
        # MLflow's server registers a version READY at once; one still registering is a status in its store.
        with sqlite3.connect(server.database) as database:
            database.execute("UPDATE model_versions SET status = 'PENDING_REGISTRATION' WHERE name = 'pending'")
        yield server
    finally:
        server.stop()


# --- resolved and served --------------------------------------------------------------------


@pytest.fixture(scope="module")
def live_staging(mlflow, tmp_path_factory) -> tuple[dict[str, Any], PreviewRun]:
    """staging, its summarizer's canary v2 the registry's `challenger` of `chat`, its labeller's v1 version 1 of
    `labeller` (on S3), previewed against the live registry: the stack and the run."""
    raw = with_registry(
        "staging", mlflow.uri, {(0, 1): {"model": "chat", "alias": "challenger"}, (1, 0): {"model": "labeller", "version": 1}}
    )
    # The labeller's registered weights are team-a's.
    owning(raw, "team-a", "s3://weights-bucket/labeller")
    return raw, preview(tmp_path_factory.mktemp("live-staging"), raw)


@pytest.mark.real_server
def test_alias_and_version_references_are_resolved_served_and_exported(mlflow, live_staging):
    _, run = live_staging
    assert run.result.returncode == 0, run.result.stderr[-3000:]

    canary = pod_template(manifest(run, "Deployment", "summarizer-v2"))
    (vllm,) = [c for c in canary["spec"]["containers"] if c["name"] == "vllm"]
    assert vllm["args"][0] == REPO
    assert vllm["args"][vllm["args"].index("--revision") + 1] == SHA_B
    assert {k: v for k, v in canary["metadata"]["annotations"].items() if "registry" in k or "weights" in k} == {
        "inference.platform/registry-model": "chat",
        "inference.platform/registry-version": "2",
        "inference.platform/registry-alias": "challenger",
        "inference.platform/weights": f"hf://{REPO}@{SHA_B}",
    }
    labeller = pod_template(manifest(run, "Service", "labeller-v1"))
    (fetch,) = labeller["spec"]["initContainers"]
    assert "s3://weights-bucket/labeller/3/" in fetch["command"]
    assert labeller["metadata"]["annotations"]["inference.platform/registry-version"] == "1"
    assert "inference.platform/registry-alias" not in labeller["metadata"]["annotations"]

    report = run.report
    exported = report["stackOutputs"]["modelRegistry"]
    assert exported["resolvedFrom"] == "live" and exported["trackingUri"] == mlflow.uri
    assert exported["models"]["summarizer"] == {
        "v1": {"source": "stack file"},
        "v2": {
            "source": "registry",
            "registeredModel": "chat",
            "alias": "challenger",
            "registryVersion": "2",
            "weights": f"hf://{REPO}@{SHA_B}",
        },
    }
    assert exported["models"]["labeller"]["v1"]["version"] == 1
    assert report["registry"]["summary"] == f"resolved live at {mlflow.uri}"
    recorded = json.loads((run.out / RECORDING_NAME).read_text())
    assert recorded["trackingUri"] == mlflow.uri
    assert sorted((e["registeredModel"], e["registryVersion"]) for e in recorded["entries"]) == [("chat", "2"), ("labeller", "1")]


@pytest.mark.real_server
def test_a_moved_alias_shows_as_a_change_of_the_models_objects(mlflow, tmp_path):
    raw = with_registry("dev", mlflow.uri, {(0, 0): {"model": "mover", "alias": "champion"}})
    before = preview(tmp_path, raw, name="before")
    assert before.result.returncode == 0, before.result.stderr[-3000:]
    mlflow.client(["alias", "mover", "champion", "2"])
    after = preview(tmp_path, raw, "--baseline", str(before.out), name="after")
    # The stable version now serves other weights without a canary: the pack refuses it...
    assert after.result.returncode == 1, after.result.stderr[-3000:]
    (refusal,) = [d for d in after.report["policies"]["data"]["diagnostics"] if d["policy"] == "canary-weight-steps"]
    assert "stable version v1 now serves hf://" in refusal["message"] and "instead of hf://" in refusal["message"]
    # ... unless this change says why.
    raw["models"][0]["release"]["stepOverride"] = {"reason": "the registry's champion is the release"}
    overridden = preview(tmp_path, raw, "--baseline", str(before.out), name="overridden")
    assert overridden.result.returncode == 0, overridden.result.stdout[-3000:]

    changes = after.report["changes"]["data"]
    assert not changes["added"] and not changes["removed"]
    changed = {c["urn"].rsplit("::", 1)[-1]: c["paths"] for c in changes["changed"]}
    paths = changed["qwen-small-v1-knative-service"]
    assert "spec.template.metadata.annotations.inference.platform/registry-version" in paths
    assert any(p.startswith("spec.template.spec.containers[0].args") for p in paths)
    assert after.report["stackOutputs"]["modelRegistry"]["models"]["qwen-small"]["v1"]["registryVersion"] == "2"


@pytest.mark.real_server
def test_the_weights_tag_is_served_over_the_source(mlflow):
    config = parse_platform_config(with_registry("dev", mlflow.uri, {(0, 0): {"model": "tagged", "version": 1}}))
    resolved, resolution = resolve_registry(config, None, recording_file=None, dry_run=True)
    source = resolved.models[0].versions[0].source
    assert (source.mlflow, source.huggingface, source.revision) == (None, REPO, SHA_C)
    entry = resolution.entry("qwen-small", "v1") if resolution is not None else None
    assert entry is not None and (entry.registry_version, entry.weights) == ("1", f"hf://{REPO}@{SHA_C}")


# --- what stops a preview ---------------------------------------------------------------------


def resolution_problem(raw: dict[str, Any]) -> str:
    """What resolving the stack's references says, in-process (the preview's exit 2 is pinned below)."""
    with pytest.raises(ConfigError) as caught:
        resolve_registry(parse_platform_config(raw), None, recording_file=None, dry_run=True)
    return str(caught.value)


@pytest.mark.real_server
def test_a_reference_the_registry_cannot_resolve_stops_the_preview(mlflow, tmp_path):
    stderr = refused(preview(tmp_path, with_registry("dev", mlflow.uri, {(0, 0): {"model": "chat", "alias": "nope"}})))
    assert (
        f"{KEY}.alias: registered model 'chat', alias 'nope': the registry answered HTTP 400 INVALID_PARAMETER_VALUE: " in stderr
    )
    assert "Registered model alias nope not found" in stderr


@pytest.mark.real_server
@pytest.mark.parametrize(
    ("reference", "key", "answer"),
    [
        (
            {"model": "nope", "alias": "champion"},
            f"{KEY}.model",
            "RESOURCE_DOES_NOT_EXIST: Registered Model with name=nope not found",
        ),
        ({"model": "chat", "version": 99}, f"{KEY}.version", "Model Version (name=chat, version=99) not found"),
        ({"model": "unpinned", "alias": "champion"}, f"{KEY}.alias", "whose weights (its source) are 'runs:/"),
        ({"model": "unpinned", "alias": "branch"}, f"{KEY}.alias", "'hf://Qwen/Qwen2.5@main': not a pinned location"),
        ({"model": "pending", "version": 1}, f"{KEY}.version", "status is 'PENDING_REGISTRATION', not READY"),
    ],
    ids=["unknown-model", "unknown-version", "runs-uri", "hf-branch", "not-ready"],
)
def test_each_unresolvable_reference_names_its_key_and_the_registrys_answer(mlflow, reference, key, answer):
    message = resolution_problem(with_registry("dev", mlflow.uri, {(0, 0): reference}))
    assert f"{key}: " in message and answer in message


# --- the lock file: what `pulumi up` may deploy ----------------------------------------------------


def _lock(project: Path, raw: dict[str, Any]) -> None:
    """Record the stack's live resolution as a live preview does (its `modelRegistry` output) and commit it as LOCK."""
    config = parse_platform_config(raw)
    _, resolution = resolve_registry(config, None, recording_file=None, dry_run=True, project_dir=project)
    assert resolution is not None
    (project / "stacks").mkdir(exist_ok=True)
    (project / LOCK).write_text(json.dumps(recording(resolution.stack_output(config), "2026-12-01T10:00:00Z")))


@pytest.mark.real_server
def test_pulumi_up_deploys_only_what_the_lock_file_holds(mlflow, tmp_path):
    reference = {(0, 0): {"model": "locked", "alias": "champion"}}
    _lock(tmp_path, with_registry("dev", mlflow.uri, reference))
    config = parse_platform_config(with_registry("dev", mlflow.uri, reference, lockFile=LOCK))
    _, resolution = resolve_registry(config, None, recording_file=None, dry_run=False, project_dir=tmp_path)
    assert resolution is not None and resolution.lock_differences == ()
    assert registry_section(resolution.stack_output(config)).summary.endswith(f"every answer held by the lock file {LOCK}")

    # The alias moves in the registry; the lock file still holds version 1.
    mlflow.client(["alias", "locked", "champion", "2"])
    with pytest.raises(ConfigError) as refused_up:
        resolve_registry(config, None, recording_file=None, dry_run=False, project_dir=tmp_path)
    (issue,) = refused_up.value.issues
    assert issue.key() == "inference-platform:models[0].versions[0].source.mlflow.alias"
    assert f"now resolves to version 2 (hf://{REPO}@{SHA_B}); the lock file {LOCK} holds version 1 (hf://{REPO}@{SHA_A})" in (
        issue.message
    )
    # A preview shows the same difference and fails, so the pull request that should move the lock shows it.
    _, previewed = resolve_registry(config, None, recording_file=None, dry_run=True, project_dir=tmp_path)
    assert previewed is not None and previewed.lock_differences == (str(issue),)
    section = registry_section(previewed.stack_output(config))
    assert section.failed and f"1 answers the lock file {LOCK} does not hold" in section.summary

    # Committing the new resolution as the lock is what lets it deploy.
    _lock(tmp_path, with_registry("dev", mlflow.uri, reference))
    _, resolution = resolve_registry(config, None, recording_file=None, dry_run=False, project_dir=tmp_path)
    assert resolution is not None and resolution.lock_differences == ()
    assert resolution.entry("qwen-small", "v1") is not None


@pytest.mark.real_server
def test_a_reference_the_lock_file_lacks_is_not_deployed(mlflow, tmp_path):
    _lock(tmp_path, with_registry("staging", mlflow.uri, {(1, 0): {"model": "labeller", "version": 1}}))
    both: dict[tuple[int, int], dict[str, Any]] = {
        (0, 1): {"model": "chat", "alias": "challenger"},
        (1, 0): {"model": "labeller", "version": 1},
    }
    config = parse_platform_config(with_registry("staging", mlflow.uri, both, lockFile=LOCK))
    with pytest.raises(ConfigError) as refused_up:
        resolve_registry(config, None, recording_file=None, dry_run=False, project_dir=tmp_path)
    (issue,) = refused_up.value.issues
    assert issue.key() == "inference-platform:models[0].versions[1].source.mlflow.alias"
    assert (
        f"alias 'challenger' of 'chat' resolves to version 2 (hf://{REPO}@{SHA_B}), which the lock file {LOCK} does not hold"
        in (issue.message)
    )


@pytest.mark.real_server
def test_a_live_preview_whose_registry_moved_past_the_lock_fails_with_the_difference(mlflow, tmp_path):
    """Through the preview CLI: the program reads the lock beside it (the project directory), so the stack names a
    lock the test writes there for the run and removes after."""
    from .helpers import ROOT

    reference = {(0, 0): {"model": "chat", "alias": "champion"}}
    lock = f"stacks/test-lock-{tmp_path.name}.json"
    (ROOT / lock).parent.mkdir(parents=True, exist_ok=True)
    try:
        _lock(tmp_path, with_registry("dev", mlflow.uri, reference))
        locked = json.loads((tmp_path / LOCK).read_text())
        locked["entries"][0]["registryVersion"] = "2"  # a lock written when the alias named version 2
        (ROOT / lock).write_text(json.dumps(locked))
        # Asked live: from the lock alone, the preview would show what the lock holds.
        run = preview(tmp_path, with_registry("dev", mlflow.uri, reference, lockFile=lock), "--registry-live")
        assert run.result.returncode == 1, run.result.stderr[-3000:]
        section = run.report["registry"]
        assert section["failed"] and section["data"]["lockFile"] == lock
        (difference,) = section["data"]["lockDifferences"]
        assert "now resolves to version 1" in difference and "holds version 2" in difference
    finally:
        (ROOT / lock).unlink(missing_ok=True)


# --- the serving aliases: the registry shows what the stack deployed -------------------------------------


def served_staging(uri: str, weight: int) -> dict[str, Any]:
    """staging, its summarizer's v1 the registry's `champion` of `served` and v2 its `challenger`, the canary at
    `weight`, with serving aliases."""
    sources = {(0, 0): {"model": "served", "alias": "champion"}, (0, 1): {"model": "served", "alias": "challenger"}}
    raw = with_registry("staging", uri, sources, servingAliases=SERVING_ALIASES)
    raw["models"][0]["release"]["canaryWeight"] = weight
    return raw


def deployed_outputs(stack: Path, folder: Path) -> Path:
    """The outputs the program exports for the stack file as it is now (`pulumi stack output --json` after an up): its
    `canaryReleases` and `modelRegistry`, resolved live, built by the functions the program exports them with."""
    import yaml

    from components.specs.routes import model_release
    from platform_config.release import to_output

    document = yaml.safe_load(stack.read_text())["config"]
    raw = {key.split(":", 1)[1]: value for key, value in document.items() if key.startswith("inference-platform:")}
    config, resolution = resolve_registry(parse_platform_config(raw), None, recording_file=None, dry_run=False)
    assert resolution is not None
    outputs = {
        "canaryReleases": {model.name: to_output(model_release(model)) for model in config.models},
        "modelRegistry": resolution.stack_output(config),
    }
    path = folder / "outputs.json"
    path.write_text(json.dumps(outputs))
    return path


def in_process(capsys: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m platform_tools ...`'s main, run here (the same code as the process, without its start-up)."""
    from platform_tools.__main__ import main

    capsys.readouterr()
    code = main(list(args))
    said = capsys.readouterr()
    return subprocess.CompletedProcess(["platform_tools", *args], code, said.out, said.err)


def aliases(mlflow: MlflowServer) -> dict[str, str]:
    (found,) = mlflow.client(["aliases", "served"])
    return found  # type: ignore[return-value]


@pytest.mark.real_server
def test_a_deploy_moves_the_serving_aliases_to_what_it_serves_and_a_promotion_and_a_rollback_move_them(mlflow, tmp_path, capsys):
    # What a first deploy leaves: the stable alias on v1's registry version, the canary's on v2's, the authors' aliases
    # untouched. The outputs are the preview's own (the program's exports), as `pulumi stack output --json` gives them.
    run = preview(tmp_path, served_staging(mlflow.uri, 25))
    assert run.result.returncode == 0, run.result.stderr[-3000:]
    stack = run.out.parent / "Pulumi.test.yaml"
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(run.report["stackOutputs"]))
    dry = tool("aliases", "test", "--stack-file", str(stack), "--deployed", str(outputs), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "served @staging: moved, no version -> version 1: summarizer/v1, stable" in dry.stdout
    assert "test: would move 2 of 2 serving aliases" in dry.stdout
    assert aliases(mlflow) == {"champion": "1", "challenger": "2"}
    moved = in_process(capsys, "aliases", "test", "--stack-file", str(stack), "--deployed", str(outputs))
    assert moved.returncode == 0, moved.stderr
    assert "served @staging-canary: moved, no version -> version 2: summarizer/v2, canary at 25%" in moved.stdout
    assert aliases(mlflow) == {"champion": "1", "challenger": "2", "staging": "1", "staging-canary": "2"}
    again = in_process(capsys, "aliases", "test", "--stack-file", str(stack), "--deployed", str(outputs))
    assert "test: moved 0 of 2 serving aliases" in again.stdout

    # Rolled back (weight 0, by hand as the canary tool writes it) and deployed: no canary takes traffic.
    rolled = in_process(capsys, "step", "test", "summarizer", "rollback", "--write", "--stack-file", str(stack))
    assert rolled.returncode == 0, rolled.stderr
    outputs = deployed_outputs(stack, tmp_path)
    moved = in_process(capsys, "aliases", "test", "--stack-file", str(stack), "--deployed", str(outputs))
    assert "served @staging-canary: moved, version 2 -> no version (removed): summarizer: no canary takes traffic" in (
        moved.stdout
    )
    assert aliases(mlflow) == {"champion": "1", "challenger": "2", "staging": "1"}

    # Raised again to its last step, then promoted: v2 is stable, and the stable alias follows it.
    write_stack(stack.parent, served_staging(mlflow.uri, 100))
    outputs = deployed_outputs(stack, tmp_path)
    assert in_process(capsys, "aliases", "test", "--stack-file", str(stack), "--deployed", str(outputs)).returncode == 0
    assert aliases(mlflow) == {"champion": "1", "challenger": "2", "staging": "1", "staging-canary": "2"}
    promoted = in_process(capsys, "step", "test", "summarizer", "promote", "--write", "--stack-file", str(stack))
    assert promoted.returncode == 0, promoted.stderr
    outputs = deployed_outputs(stack, tmp_path)
    moved = in_process(capsys, "aliases", "test", "--stack-file", str(stack), "--deployed", str(outputs))
    assert moved.returncode == 0, moved.stderr
    assert "served @staging: moved, version 1 -> version 2: summarizer/v2, stable" in moved.stdout
    assert aliases(mlflow) == {"champion": "1", "challenger": "2", "staging": "2"}


def test_staging_deploys_only_what_its_lock_holds(mlflow, tmp_path):
    """`pulumi up` of staging's registry versions against a registry whose `challenger` is not the lock's version: it
    stops, naming the key. Staging's lock is of its own registry, so the same lock, re-recorded for the test's MLflow
    (its tracking URI), is put beside a copy of the stack."""
    raw = copy.deepcopy(raw_stack("staging"))
    raw["registry"] = {**raw["registry"], "trackingUri": mlflow.uri, "lockFile": LOCK}
    raw["models"][0]["versions"][1]["source"]["mlflow"]["model"] = "served"  # `served` challenger is version 2
    committed = json.loads((ROOT / "stacks" / "Pulumi.staging.registry.json").read_text())
    committed["trackingUri"] = mlflow.uri
    committed["entries"][0]["registeredModel"] = "served"
    committed["entries"][0]["weights"] = f"hf://{REPO}@{SHA_B}"
    (tmp_path / "stacks").mkdir()
    (tmp_path / LOCK).write_text(json.dumps(committed))
    config = parse_platform_config(raw)
    _, resolution = resolve_registry(config, None, recording_file=None, dry_run=False, project_dir=tmp_path)
    assert resolution is not None and resolution.lock_differences == ()

    committed["entries"][0]["registryVersion"] = "1"  # a lock of when `challenger` named version 1
    (tmp_path / LOCK).write_text(json.dumps(committed))
    with pytest.raises(ConfigError) as refused_up:
        resolve_registry(config, None, recording_file=None, dry_run=False, project_dir=tmp_path)
    (issue,) = refused_up.value.issues
    assert issue.key() == "inference-platform:models[0].versions[1].source.mlflow.alias"
    assert f"now resolves to version 2 (hf://{REPO}@{SHA_B}); the lock file {LOCK} holds version 1" in issue.message


# --- offline, once the registry is gone ----------------------------------------------------------------


@pytest.mark.real_server
def test_a_preview_from_a_recording_needs_no_registry(mlflow, live_staging, tmp_path):
    raw, live = live_staging
    assert live.result.returncode == 0, live.result.stderr[-3000:]
    mlflow.stop()  # the module's last use of it

    offline = preview(tmp_path, raw, "--registry-file", str(live.out / RECORDING_NAME), name="offline")
    assert offline.result.returncode == 0, offline.result.stderr[-3000:]
    assert offline.out.joinpath("resources.json").read_text() == live.out.joinpath("resources.json").read_text()
    section = offline.report["registry"]
    recorded_at = json.loads((live.out / RECORDING_NAME).read_text())["recordedAt"]
    assert section["summary"] == (
        f"resolved from the recorded file {live.out / RECORDING_NAME} (recorded {recorded_at} from {mlflow.uri}), "
        "not the live registry"
    )
    assert section["data"]["models"]["summarizer"]["v2"]["registryVersion"] == "2"
    assert not (offline.out / RECORDING_NAME).exists()
