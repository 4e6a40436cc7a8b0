"""Versions named in the MLflow model registry, without one: every way the registry (or a recording, or a lock
file) cannot answer stops the preview with exit 2 naming the key. What MLflow cannot show (the bearer token
it does not check, a server that stalls or floods) is played by a small stdlib HTTP server."""

from __future__ import annotations

import http.server
import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from platform_config.errors import ConfigError
from platform_config.loader import parse_platform_config
from platform_config.registry import REGISTRY_FILE_ENV, RegistryFileError, read_recording, resolve_registry

from .helpers import owning, registry_recording, resolved_from_lock
from .registry_helpers import KEY, LOCK, REPO, SHA_A, manifest, pod_template, preview, refused, with_registry
from .servers.mlflow import free_port

# --- what stops a preview ---------------------------------------------------------------------


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
            registry_recording(
                "http://mlflow.invalid",
                [{"registeredModel": "chat", "alias": "champion", "registryVersion": "1", "weights": "s3://bkt/chat//v4"}],
            ),
            "weights 's3://bkt/chat//v4' is not a pinned location (hf://org/name@<40-character commit SHA> or "
            "s3://bucket/prefix/<version folder>, with one '/' between the S3 path's segments (no '//'))",
        ),
        (
            registry_recording("http://mlflow.invalid", [{"registeredModel": "chat", "registryVersion": "1"}]),
            "entries[0].weights: Field required",
        ),
    ],
    ids=["unknown-format-version", "unpinned-weights", "empty-path-segment", "missing-key"],
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


def test_a_registry_location_with_an_empty_path_segment_names_its_key_and_where_it_came_from(fake_registry):
    """A version whose source S3 would read as another key prefix (`chat//v4` is not `chat/v4`) is refused, never
    served, granted and checked as the location without the extra `/`."""
    version = {"name": "chat", "version": "4", "source": "s3://team-b-batch/chat//v4", "status": "READY", "tags": []}
    fake_registry.behaviour = (200, json.dumps({"model_version": version}).encode(), 0)
    config = parse_platform_config(with_registry("dev", fake_registry.uri, {(0, 0): {"model": "chat", "alias": "champion"}}))
    with pytest.raises(ConfigError) as caught:
        resolve_registry(config, None, recording_file=None, dry_run=True)
    message = str(caught.value)
    assert f"{KEY}.alias: registered model 'chat', alias 'champion' is version 4, whose weights (its source) are " in message
    assert "'s3://team-b-batch/chat//v4': not a pinned location" in message and "(no '//')" in message


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
