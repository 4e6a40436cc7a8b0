"""Versions named in the MLflow model registry: resolved at preview into pinned weights, served, exported and
recorded; every way the registry (or a recording) cannot answer stops the preview with exit 2 naming the key.

The registry is a real MLflow tracking server started on loopback once for the module (SQLite, a temporary artifact
folder), its models, versions, tags and aliases registered with MLflow's own client. What MLflow cannot show (the
bearer token it does not check, a server that stalls or floods) is played by a small stdlib HTTP server.
"""

from __future__ import annotations

import copy
import http.server
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from platform_config.errors import ConfigError
from platform_config.loader import parse_platform_config
from platform_config.models import ServingAliases
from platform_config.registry import (
    RECORDING_NAME,
    REGISTRY_FILE_ENV,
    RegistryFileError,
    read_recording,
    recording,
    resolve_registry,
)
from preview.sections import registry_section

from .conftest import early_mlflow
from .helpers import (
    ROOT,
    PreviewRun,
    config_problems,
    owning,
    raw_stack,
    registry_recording,
    resolved_from_lock,
    run_preview,
    write_stack,
)
from .servers.mlflow import MlflowServer, free_port, missing_reason, start_mlflow, wait_until_healthy

SHA_A = "7ae557604adf67be50417f59c2c2f167def9a775"
SHA_B = "aa" * 20
SHA_C = "0123456789abcdef0123456789abcdef01234567"
REPO = "Qwen/Qwen2.5-0.5B-Instruct"

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


def with_registry(base: str, uri: str, sources: dict[tuple[int, int], dict[str, Any]], **registry: Any) -> dict[str, Any]:
    """A committed stack with a registry block and some versions' sources in it ({(model, version): mlflow ref}); the
    versions it takes from its own registry (staging's canary) pinned to what its lock file holds, so only the test's
    references are asked."""
    from platform_config.models import pinned_source

    raw = copy.deepcopy(raw_stack(base))
    own = raw.get("registry", {}).get("lockFile")
    locked = json.loads((ROOT / own).read_text())["entries"] if own else []
    for model in raw["models"]:
        for version in model["versions"]:
            reference = version["source"].get("mlflow")
            if reference is not None:
                (entry,) = [
                    e for e in locked if (e["registeredModel"], e.get("alias")) == (reference["model"], reference.get("alias"))
                ]
                pinned = pinned_source(entry["weights"])
                assert pinned is not None
                version["source"] = {"huggingface": pinned.huggingface, "revision": pinned.revision}
    raw["registry"] = {"trackingUri": uri, **registry}
    for (model, version), reference in sources.items():
        raw["models"][model]["versions"][version]["source"] = {"mlflow": reference}
    return raw


def preview(
    tmp_path: Path, raw: dict[str, Any], *args: str, name: str = "out", extra: dict[str, Any] | None = None
) -> PreviewRun:
    folder = tmp_path / name
    folder.mkdir()
    stack = write_stack(folder, raw, extra)
    out = folder / "preview"
    result = run_preview("--stack", "test", "--config-file", str(stack), "--out", str(out), *args)
    return PreviewRun("test", out, result)


def refused(run: PreviewRun) -> str:
    assert run.result.returncode == 2, run.result.stdout[-2000:] + run.result.stderr[-2000:]
    assert "Traceback" not in run.result.stderr
    return run.result.stderr


def manifest(run: PreviewRun, kind: str, name: str) -> dict[str, Any]:
    (found,) = [m for m in run.manifests() if m["kind"] == kind and m["metadata"]["name"] == name]
    return found


def pod_template(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]


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

KEY = "inference-platform:models[0].versions[0].source.mlflow"


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


def test_an_unreachable_registry_stops_the_preview_in_time(tmp_path):
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    stderr = refused(preview(tmp_path, with_registry("dev", uri, {(0, 0): {"model": "chat", "alias": "champion"}})))
    assert f"inference-platform:registry.trackingUri: the registry at {uri} cannot be reached: " in stderr
    assert "refused" in stderr.lower()
    assert time.monotonic() - started < 60


def test_a_registry_source_needs_a_registry_block(tmp_path):
    raw = with_registry("dev", "http://127.0.0.1:1", {(0, 0): {"model": "chat", "alias": "champion"}})
    del raw["registry"]
    stderr = refused(preview(tmp_path, raw))
    assert f"{KEY}: names a version in the MLflow registry, but the stack has no 'registry.trackingUri'" in stderr


def test_the_registry_token_must_be_a_secret(tmp_path):
    raw = with_registry("dev", "http://127.0.0.1:1", {(0, 0): {"model": "chat", "alias": "champion"}})
    stderr = refused(preview(tmp_path, raw, extra={"inference-platform:registryToken": "tok-in-the-clear"}))
    assert "inference-platform:registryToken: must be a secret" in stderr and "tok-in-the-clear" not in stderr


# --- a recorded resolution ----------------------------------------------------------------------


def test_a_recording_without_the_reference_stops_the_preview(tmp_path):
    uri = "http://mlflow.invalid"
    file = tmp_path / "recording.json"
    file.write_text(json.dumps(registry_recording(uri, [])))
    raw = with_registry("dev", uri, {(0, 0): {"model": "chat", "alias": "champion"}})
    stderr = refused(preview(tmp_path, raw, "--registry-file", str(file)))
    assert (
        f"{KEY}.alias: the recorded registry resolution {file} has no entry for registered model 'chat', alias 'champion'"
        in stderr
    )


def test_a_malformed_recording_stops_the_preview(tmp_path):
    file = tmp_path / "recording.json"
    file.write_text("{not json")
    raw = with_registry("dev", "http://mlflow.invalid", {(0, 0): {"model": "chat", "alias": "champion"}})
    stderr = refused(preview(tmp_path, raw, "--registry-file", str(file)))
    assert f"the recorded registry resolution {file} ({REGISTRY_FILE_ENV}) is not JSON" in stderr


@pytest.mark.parametrize(
    ("document", "said"),
    [
        ({**registry_recording("http://mlflow.invalid", []), "formatVersion": 2}, "formatVersion: Input should be 1"),
        (
            registry_recording(
                "http://mlflow.invalid",
                [{"registeredModel": "chat", "alias": "champion", "registryVersion": "1", "weights": "runs:/x/model"}],
            ),
            "entries[0]: Value error, weights 'runs:/x/model' is not a pinned location",
        ),
        (
            registry_recording("http://mlflow.invalid", [{"registeredModel": "chat", "registryVersion": "1"}]),
            "entries[0].weights: Field required",
        ),
    ],
    ids=["unknown-format-version", "unpinned-weights", "missing-key"],
)
def test_a_recording_is_checked_strictly(tmp_path, document, said):
    file = tmp_path / "recording.json"
    file.write_text(json.dumps(document))
    with pytest.raises(RegistryFileError) as caught:
        read_recording(file)
    assert f"the recorded registry resolution {file} ({REGISTRY_FILE_ENV}) is not a valid recording: " in str(caught.value)
    assert said in str(caught.value)


def test_a_missing_registry_file_stops_the_preview(tmp_path):
    raw = with_registry("dev", "http://mlflow.invalid", {(0, 0): {"model": "chat", "alias": "champion"}})
    stderr = refused(preview(tmp_path, raw, "--registry-file", str(tmp_path / "absent.json")))
    assert "--registry-file" in stderr and "no such file" in stderr


def test_a_recording_of_another_registry_is_refused(tmp_path):
    file = tmp_path / "recording.json"
    file.write_text(json.dumps(registry_recording("http://other.invalid", [])))
    config = parse_platform_config(
        with_registry("dev", "http://mlflow.invalid", {(0, 0): {"model": "chat", "alias": "champion"}})
    )
    with pytest.raises(
        ConfigError, match=r"registry\.trackingUri: 'http://mlflow\.invalid', but the recorded registry resolution"
    ):
        resolve_registry(config, None, recording_file=str(file), dry_run=True)


def test_a_deploy_refuses_a_recording(tmp_path):
    file = tmp_path / "recording.json"
    file.write_text(json.dumps(registry_recording("http://mlflow.invalid", [])))
    config = parse_platform_config(
        with_registry("dev", "http://mlflow.invalid", {(0, 0): {"model": "chat", "alias": "champion"}})
    )
    with pytest.raises(RegistryFileError, match="for previews only, and `pulumi up` always asks the registry"):
        resolve_registry(config, None, recording_file=str(file), dry_run=False)


# --- what MLflow cannot show: the token, a stalling or flooding server --------------------------


class _Registry(http.server.BaseHTTPRequestHandler):
    """Answers every GET as the server's `behaviour` says, and records the requests' headers."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        server: Any = self.server
        server.seen.append(dict(self.headers))
        status, body, delay = server.behaviour
        time.sleep(delay)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:
            pass

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fake_registry() -> Iterator[Any]:
    server: Any = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    server.daemon_threads = True
    server.seen = []
    version = {"name": "chat", "version": "4", "source": f"hf://{REPO}@{SHA_A}", "status": "READY", "tags": []}
    server.behaviour = (200, json.dumps({"model_version": version}).encode(), 0)
    server.uri = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_the_token_is_sent_as_a_bearer_token(fake_registry, tmp_path, monkeypatch):
    # The offline preview cannot decrypt the stack's secret: the token comes from the environment.
    monkeypatch.setenv("INFERENCE_PLATFORM_REGISTRY_TOKEN", "tok-4711")
    raw = with_registry("dev", fake_registry.uri, {(0, 0): {"model": "chat", "alias": "champion"}})
    run = preview(tmp_path, raw, extra={"inference-platform:registryToken": {"secure": "AAABAKXrzOvzQ5o="}})
    assert run.result.returncode == 0, run.result.stderr[-3000:]
    assert [headers.get("Authorization") for headers in fake_registry.seen] == ["Bearer tok-4711"]
    assert "tok-4711" not in run.out.joinpath("report.json").read_text() + "".join(p.read_text() for p in run.out.rglob("*.yaml"))


def test_a_refused_token_names_the_token_key_and_never_prints_it(fake_registry):
    fake_registry.behaviour = (401, b'{"error_code": "UNAUTHENTICATED", "message": "bad token tok-4711"}', 0)
    config = parse_platform_config(with_registry("dev", fake_registry.uri, {(0, 0): {"model": "chat", "alias": "champion"}}))
    with pytest.raises(ConfigError) as caught:
        resolve_registry(config, "tok-4711", recording_file=None, dry_run=True)
    message = str(caught.value)
    assert "inference-platform:registryToken: the registry at" in message and "refused the token" in message
    assert "UNAUTHENTICATED" in message and "tok-4711" not in message


def test_a_token_echoed_in_a_version_field_is_never_printed(fake_registry):
    version = {"name": "chat", "version": "4", "source": "runs:/tok-4711/model", "status": "tok-4711", "tags": []}
    fake_registry.behaviour = (200, json.dumps({"model_version": version}).encode(), 0)
    config = parse_platform_config(with_registry("dev", fake_registry.uri, {(0, 0): {"model": "chat", "alias": "champion"}}))
    with pytest.raises(ConfigError) as caught:
        resolve_registry(config, "tok-4711", recording_file=None, dry_run=True)
    assert "not READY" in str(caught.value) and "[secret]" in str(caught.value) and "tok-4711" not in str(caught.value)


def test_a_token_is_never_sent_in_clear_to_another_host():
    raw = with_registry("dev", "http://mlflow.example.com", {(0, 0): {"model": "chat", "alias": "champion"}})
    with pytest.raises(ConfigError, match=r"registry\.trackingUri: 'http://mlflow\.example\.com' is plain http to another host"):
        resolve_registry(parse_platform_config(raw), "tok-4711", recording_file=None, dry_run=True)


def test_a_recording_that_is_no_regular_file_is_refused_without_reading_it(tmp_path):
    fifo = tmp_path / "recording.json"
    os.mkfifo(fifo)
    config = parse_platform_config(
        with_registry("dev", "http://mlflow.invalid", {(0, 0): {"model": "chat", "alias": "champion"}})
    )
    with pytest.raises(RegistryFileError, match="is not a regular file"):
        resolve_registry(config, None, recording_file=str(fifo), dry_run=True)


def test_a_stalling_registry_is_given_up_on_after_its_timeout(fake_registry):
    fake_registry.behaviour = (200, b"{}", 5)
    raw = with_registry("dev", fake_registry.uri, {(0, 0): {"model": "chat", "alias": "champion"}}, timeoutSeconds=1)
    config = parse_platform_config(raw)
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"registry\.trackingUri: the registry at .* (did not answer in time|no answer within)"):
        resolve_registry(config, None, recording_file=None, dry_run=True)
    assert time.monotonic() - started < 3


def test_a_flooding_registry_is_read_no_further_than_a_mebibyte(fake_registry):
    fake_registry.behaviour = (200, b" " * (3 << 20), 0)
    raw = with_registry("dev", fake_registry.uri, {(0, 0): {"model": "chat", "alias": "champion"}})
    with pytest.raises(ConfigError, match="with more than 1 MiB: not a model version"):
        resolve_registry(parse_platform_config(raw), None, recording_file=None, dry_run=True)


# --- the lock file: what `pulumi up` may deploy ----------------------------------------------------

LOCK = "stacks/Pulumi.test.registry.json"


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


def test_a_lock_file_of_another_registry_is_refused(tmp_path):
    (tmp_path / "stacks").mkdir()
    entry = {"registeredModel": "chat", "alias": "champion", "registryVersion": "1", "weights": f"hf://{REPO}@{SHA_A}"}
    (tmp_path / LOCK).write_text(json.dumps(registry_recording("https://other-registry.example.com", [entry])))
    config = parse_platform_config(
        with_registry("dev", "https://mlflow.example.com", {(0, 0): {"model": "chat", "alias": "champion"}}, lockFile=LOCK)
    )
    with pytest.raises(
        ConfigError,
        match=r"registry\.lockFile: 'https://mlflow.example.com', but the lock file stacks/Pulumi.test.registry.json is of 'https://other",
    ):
        resolve_registry(config, None, recording_file=None, dry_run=False, project_dir=tmp_path)


@pytest.mark.parametrize(
    "path",
    [
        "../outside.json",
        "/etc/lock.json",
        "stacks/../../x.json",
        "stacks/lock.yaml",
        "./lock.json",
        "stacks/.hidden.json",
        "build/preview/prod/registry-resolution.json",
    ],
)
def test_a_lock_file_outside_the_project_or_not_json_exits_2_naming_the_key(path):
    raw = with_registry("dev", "https://mlflow.example.com", {(0, 0): {"model": "chat", "alias": "champion"}}, lockFile=path)
    with pytest.raises(ConfigError, match=r"registry\.lockFile.*is not a \.json file in the stack files' folder"):
        parse_platform_config(raw)


def test_production_needs_a_lock_file_for_registry_versions():
    reference: dict[str, Any] = {"model": "chat", "alias": "champion"}
    raw = with_registry("prod", "https://mlflow.example.com", {(1, 0): reference})
    with pytest.raises(ConfigError, match=r"registry\.lockFile: is required in production: llama-8b name versions"):
        parse_platform_config(raw)
    raw["registry"]["lockFile"] = LOCK
    parse_platform_config(raw)


# --- last: the server goes away ---------------------------------------------------------------


# --- the serving aliases: the registry shows what the stack deployed -------------------------------------

SERVING_ALIASES = {"stable": "staging", "canary": "staging-canary"}


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


def tool(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m platform_tools ...` as the deploy workflow runs it."""
    return subprocess.run([sys.executable, "-m", "platform_tools", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


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


def test_a_serving_alias_a_source_reads_is_refused():
    raw = with_registry("staging", "https://mlflow.example.com", {(0, 1): {"model": "served", "alias": "staging-canary"}})
    raw["registry"]["servingAliases"] = SERVING_ALIASES
    problems = config_problems(raw)
    assert any(
        p.startswith(
            "inference-platform:models[0].versions[1].source.mlflow.alias: 'staging-canary' is "
            "registry.servingAliases.canary (summarizer): the deploy moves that alias"
        )
        for p in problems
    ), problems
    raw["registry"]["servingAliases"] = {"stable": "prod", "canary": "prod"}
    assert any("registry.servingAliases" in p and "stable and canary are both 'prod'" in p for p in config_problems(raw))


def test_one_alias_wanted_on_two_versions_is_refused_and_outputs_of_another_registry_exit_2(tmp_path):
    from platform_tools.aliases import AliasInputError, wanted_aliases

    sources = {(0, 0): {"model": "served", "version": 1}, (1, 0): {"model": "served", "version": 2}}
    raw = with_registry("staging", "https://mlflow.example.com", sources, servingAliases=SERVING_ALIASES)
    # The stack is refused before any deploy: two models on one registered model could want one alias on two versions.
    assert (
        "inference-platform:models[1].versions[0].source.mlflow.model: registered model 'served' is summarizer's too "
        "(inference-platform:models[0].versions[0].source.mlflow): with registry.servingAliases each model and adapter "
        "takes its versions from a registered model of its own"
    ) in config_problems(raw)
    # The tool holds to it too, whatever the outputs it is given.
    del raw["registry"]["servingAliases"]
    plain = parse_platform_config(raw)
    aliases = ServingAliases(stable="staging", canary="staging-canary")
    config = plain.model_copy(update={"registry": plain.registry.model_copy(update={"serving_aliases": aliases})})
    raw["registry"]["servingAliases"] = SERVING_ALIASES
    entry = {"source": "registry", "registeredModel": "served"}
    outputs: dict[str, Any] = {
        "canaryReleases": {
            "summarizer": {"stable": "v1", "canary": "v2", "canaryWeight": 0, "adapters": {}},
            "labeller": {"stable": "v1", "canary": None, "canaryWeight": 0, "adapters": {}},
            "assistant": {"stable": "v1", "canary": None, "canaryWeight": 0, "adapters": {}},
            "code-helper": {"stable": "v1", "canary": None, "canaryWeight": 0, "adapters": {}},
            "rag-answerer": {"stable": "v1", "canary": None, "canaryWeight": 0, "adapters": {}},
            "embedder": {"stable": "v1", "canary": None, "canaryWeight": 0, "adapters": {}},
        },
        "modelRegistry": {
            "trackingUri": "https://mlflow.example.com",
            "models": {
                "summarizer": {"v1": {**entry, "registryVersion": "1"}},
                "labeller": {"v1": {**entry, "registryVersion": "2"}},
            },
        },
    }
    with pytest.raises(AliasInputError, match="alias 'staging' would name version 1 .summarizer/v1, stable. and version 2"):
        wanted_aliases(outputs, config)

    # Outputs resolved at another registry than the stack's: exit 2 before any request.
    raw = with_registry("staging", "https://mlflow.example.com", {(0, 0): sources[(0, 0)]}, servingAliases=SERVING_ALIASES)
    stack = write_stack(tmp_path, raw)
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps({**outputs, "modelRegistry": {**outputs["modelRegistry"], "trackingUri": "https://other"}}))
    done = tool("aliases", "test", "--stack-file", str(stack), "--deployed", str(path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "resolved at 'https://other', but registry.trackingUri is 'https://mlflow.example.com'" in done.stderr


# --- a committed stack that takes a version from the registry ------------------------------------------


def test_staging_previews_its_canary_from_the_registry_through_its_lock_file(previews):
    run = previews["staging"]
    assert run.result.returncode == 0, run.result.stderr[-3000:]
    section = run.report["registry"]
    assert not section["failed"]
    data = section["data"]
    assert (data["resolvedFrom"], data["lockFile"], data["recordingFile"]) == (
        "recorded",
        "stacks/Pulumi.staging.registry.json",
        "stacks/Pulumi.staging.registry.json",
    )
    assert data["lockDifferences"] == []
    assert data["models"]["summarizer"]["v2"] == {
        "source": "registry",
        "registeredModel": "summarizer",
        "alias": "challenger",
        "registryVersion": "2",
        "weights": "hf://Qwen/Qwen2.5-1.5B-Instruct@989aa7980e4cf806f80c7fef2b1adb7bc71aa306",
    }
    server = manifest(run, "Deployment", "summarizer-v2")
    annotations = pod_template(server)["metadata"]["annotations"]
    assert annotations["inference.platform/registry-version"] == "2"
    assert "Qwen/Qwen2.5-1.5B-Instruct" in json.dumps(pod_template(server)["spec"]["containers"])


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


@pytest.mark.parametrize(("content", "message"), [(None, "cannot be read"), ("{}", "is not a valid recording")])
def test_a_lock_file_that_is_missing_or_no_recording_exits_2_naming_the_key(tmp_path, content, message):
    if content is not None:
        (tmp_path / "stacks").mkdir()
        (tmp_path / LOCK).write_text(content)
    config = parse_platform_config(
        with_registry("dev", "https://mlflow.example.com", {(0, 0): {"model": "chat", "alias": "champion"}}, lockFile=LOCK)
    )
    with pytest.raises(ConfigError) as caught:
        resolve_registry(config, None, recording_file=None, dry_run=True, project_dir=tmp_path)
    (issue,) = caught.value.issues
    assert issue.key() == "inference-platform:registry.lockFile"
    assert issue.message.startswith(f"the lock file {LOCK} {message}") and REGISTRY_FILE_ENV not in issue.message


def test_a_registry_answer_naming_data_outside_the_tenants_prefixes_stops_the_preview(tmp_path):
    """What the registry (here its recording) resolves a version to is checked like a stack file's location: staging's
    summarizer (team-a, no prefixes of its own) resolved to a bucket of team-b's is refused naming the version's key
    (the resolved source's), exit 2."""
    uri = "http://mlflow.invalid"
    file = tmp_path / "recording.json"
    entry = {"registeredModel": "summarizer", "alias": "champion", "registryVersion": "3", "weights": "s3://team-b-batch/w/v1"}
    file.write_text(json.dumps(registry_recording(uri, [entry])))
    raw = with_registry("staging", uri, {(0, 0): {"model": "summarizer", "alias": "champion"}})
    stderr = refused(preview(tmp_path, raw, "--registry-file", str(file)))
    assert "inference-platform:models[0].versions[0].source.s3Uri: s3://team-b-batch/w is not under tenant 'team-a''s" in stderr


def test_a_lock_file_entry_naming_another_tenants_copies_is_refused(tmp_path):
    """prod previews from its lock file: an entry resolving team-a's llama-1b to the serving tenant's copies in the
    weight mirror is refused, as the loader checks the resolved config again (platform_config/loader.py)."""
    from platform_config.checks import run_checks

    entry = {
        "registeredModel": "llama-1b",
        "alias": "champion",
        "registryVersion": "3",
        "weights": "s3://inference-prod-model-weights/serving/meta-llama/Llama-3.1-70B-Instruct/v1",
    }
    raw = with_registry("prod", "https://mlflow.example.com", {(2, 0): {"model": "llama-1b", "alias": "champion"}})
    config, _ = resolved_from_lock(raw, "https://mlflow.example.com", [entry], tmp_path)
    issues = [str(i) for i in run_checks(config)]
    assert any(
        i.startswith("inference-platform:models[2].versions[0].source.s3Uri: s3://inference-prod-model-weights/serving/")
        and "is not under tenant 'team-a''s s3Prefixes (none)" in i
        for i in issues
    ), issues


def test_a_registry_answer_holding_a_credential_stops_the_preview_without_echoing_it(tmp_path):
    """A weights location is free text to the registry: one that holds a token (here a Hugging Face one in an S3 key)
    is refused like the stack file's own values, naming the resolved key and not the token."""
    uri = "http://mlflow.invalid"
    token = "hf_" + "Ab3" * 12
    file = tmp_path / "recording.json"
    entry = {
        "registeredModel": "summarizer",
        "alias": "champion",
        "registryVersion": "3",
        "weights": f"s3://team-a-data/{token}/v1",
    }
    file.write_text(json.dumps(registry_recording(uri, [entry])))
    raw = owning(
        with_registry("staging", uri, {(0, 0): {"model": "summarizer", "alias": "champion"}}), "team-a", "s3://team-a-data"
    )
    stderr = refused(preview(tmp_path, raw, "--registry-file", str(file)))
    assert "inference-platform:models[0].versions[0].source.s3Uri: holds a Hugging Face token in clear" in stderr
    assert token not in stderr


def test_a_serving_alias_may_not_be_latest_in_any_case_and_outputs_that_are_not_the_stack_files_are_refused(tmp_path):
    from platform_tools.aliases import AliasInputError, wanted_aliases

    raw = with_registry("staging", "https://mlflow.example.com", {}, servingAliases={"stable": "Latest", "canary": "c"})
    assert any("registry.servingAliases.stable: 'Latest' is not an MLflow alias" in p for p in config_problems(raw))

    sources = {(0, 0): {"model": "served", "version": 1}}
    raw = with_registry("staging", "https://mlflow.example.com", sources, servingAliases=SERVING_ALIASES)
    config = parse_platform_config(raw)
    releases: dict[str, Any] = {
        m["name"]: {"stable": "v1", "canary": None, "canaryWeight": 0, "adapters": {}} for m in raw["models"]
    }
    registry = {"trackingUri": "https://mlflow.example.com", "models": {}}
    # summarizer/v1 is the registry's in the stack file: outputs without its entry were not this stack file deployed.
    with pytest.raises(AliasInputError, match="modelRegistry.models.summarizer.v1 is not the registry version"):
        wanted_aliases({"canaryReleases": releases, "modelRegistry": registry}, config)
    # A release naming a version the stack file does not declare, or a weight that is no number, neither.
    entry = {"source": "registry", "registeredModel": "served", "registryVersion": "1"}
    registry["models"] = {"summarizer": {"v1": entry}}
    for bad in ({"stable": "v9"}, {"canaryWeight": True}):
        broken = {**releases, "summarizer": {**releases["summarizer"], **bad}}
        with pytest.raises(AliasInputError, match="canaryReleases.summarizer is not a release of the stack file's versions"):
            wanted_aliases({"canaryReleases": broken, "modelRegistry": registry}, config)

    # What the stack took versions from before and no longer does loses both aliases.
    previous = {"modelRegistry": {"models": {"summarizer": {"v1": {**entry, "registeredModel": "old-summarizer"}}}}}
    wanted = wanted_aliases({"canaryReleases": releases, "modelRegistry": registry}, config, previous)
    assert [(w.registered_model, w.alias, w.version) for w in wanted] == [
        ("old-summarizer", "staging", None),
        ("old-summarizer", "staging-canary", None),
        ("served", "staging", "1"),
        ("served", "staging-canary", None),
    ]
