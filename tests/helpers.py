"""Test helpers: stack files as config mappings, and running the offline preview."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

if TYPE_CHECKING:
    from platform_config.pins import SourceReleasePin
    from preview.vllm_release import SourceRelease

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

os.environ.setdefault("PULUMI_ERROR_OUTPUT_STRING", "true")
os.environ.setdefault("CRD_SCHEMA_DIR", str((ROOT.parent / "shared" / "crd-schemas").resolve()))

STACKS = ("dev", "staging", "prod")
PROJECT = "inference-platform"
T = TypeVar("T")

# The policy config under which the suite reads the pack's other verdicts on the committed stacks: their images are
# by tag (no registry is reachable here to lock them, and digests are not invented), so on prod the pack's
# image-digests rule would refuse every pod. tests/test_image_lock.py tests that rule, on the pack itself.
IMAGES_BY_TAG: dict[str, Any] = {"image-digests": {"enforcementLevel": "disabled"}}


def stack_file(stack: str) -> Path:
    return ROOT / "stacks" / f"Pulumi.{stack}.yaml"


def raw_stack(stack: str) -> dict[str, Any]:
    """The project-namespaced config of a stack file as a plain mapping, keys without prefix."""
    from platform_config.models import SECRET_KEYS

    data = yaml.safe_load(stack_file(stack).read_text())["config"]
    return {
        key.split(":", 1)[1]: value
        for key, value in data.items()
        if key.startswith(f"{PROJECT}:") and key.split(":", 1)[1] not in SECRET_KEYS
    }


def downloading_weights(raw: dict[str, Any]) -> dict[str, Any]:
    """A stack without its weight mirror, each pool on the disk it would have by default (prod's p5 and g6: the
    instance store), outside production (staging, where a stack may do without the mirror): its servers download
    their Hugging Face weights themselves, the path tests of the download, the cache volume and the token hold to
    (prod itself reads the mirror's copies, as production must)."""
    raw.pop("weightMirror", None)
    raw["environment"] = "staging"
    for pool in raw["nodePools"]:
        pool.setdefault("weightCache", {})["medium"] = "instanceStore"
    return raw


# The batch-labelling server prod ran before its labelling became batch jobs queued through
# Kueue: a scale-to-zero Knative service of the batch-labelling profile, batch tier only, in
# team-b on the L4 spot pool. Tests of that kind of server (scale to zero, batch-only routes and
# tokens, single-tier servers) put it back into prod, where it was (before llama-8b-batch).
LABELLER_SERVER: dict[str, Any] = {
    "name": "batch-labeller",
    "servedModelName": "batch-labeller",
    "tenant": "team-b",
    "pool": "l4-batch",
    "profile": "batch-labelling",
    "resources": {"gpus": 1, "cpu": "8", "memory": "48Gi", "cacheSize": "40Gi"},
    "server": {"maxModelLen": 8192},
    "versions": [
        {
            "name": "v1",
            "source": {"huggingface": "Qwen/Qwen2.5-7B-Instruct", "revision": "a09a35458c702b33eeacc393d103063234e8bc28"},
        }
    ],
    "release": {"stable": "v1"},
    # One replica at least: production puts an endpoint picker in front, which cannot wake a
    # revision at zero.
    "autoscaling": {"mode": "kpa", "minReplicas": 1, "maxReplicas": 2},
}


def owning(raw: dict[str, Any], tenant: str, *prefixes: str) -> dict[str, Any]:
    """`raw` with `prefixes` among the tenant's `s3Prefixes`: a test that gives a tenant's workloads S3 data of their
    own declares it the tenant's, as a stack must (platform_config/checks/tenants.py check_tenant_s3_data)."""
    declared = next(t for t in raw["tenants"] if t["name"] == tenant).setdefault("s3Prefixes", [])
    declared.extend(prefix for prefix in prefixes if prefix not in declared)
    return raw


def prod_with_labeller_server() -> dict[str, Any]:
    """The prod stack's config with the batch-labelling server (LABELLER_SERVER) among its models."""
    import copy

    raw = copy.deepcopy(raw_stack("prod"))
    index = next(i for i, m in enumerate(raw["models"]) if m["name"] == "llama-8b-batch")
    raw["models"].insert(index, copy.deepcopy(LABELLER_SERVER))
    # Room for its endpoint pickers (2, and 2 more while a rollout's old ones drain) in team-b's
    # experiment budget.
    team_b = next(t for t in raw["tenants"] if t["name"] == "team-b")
    team_b["experimentQuota"] |= {"cpu": "34", "memory": "180Gi", "pods": 8}
    return raw


def validate(raw: dict[str, Any]) -> Any:
    """The whole validation the program runs on a stack's config: parse and check it, then
    resolve it into the plan (whose backends' rules and peak checks run there). The plan."""
    from components.plan import plan_checks, resolve
    from platform_config.loader import cluster_region, parse_platform_config

    config = from_lock(parse_platform_config(raw, [plan_checks]))
    return resolve(config, hugging_face_tenants=(), region=cluster_region(config, None))


def from_lock(config: Any) -> Any:
    """The config with its registry versions resolved from the lock file it names (`registry.lockFile`, in the
    project), as the offline preview resolves them; unchanged when it names none."""
    from platform_config.registry import registry_references, resolve_registry

    lock = config.registry.lock_file
    if lock is None or not registry_references(config):
        return config
    resolved, _ = resolve_registry(config, None, recording_file=str(ROOT / lock), dry_run=True)
    return resolved


def config_problems(raw: dict[str, Any]) -> list[str]:
    """Every problem the program reports for these keys, one line each (it must find one)."""
    import pytest

    from platform_config.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        validate(raw)
    return [str(issue) for issue in caught.value.issues]


def set_at(raw: Any, path: tuple[Any, ...], value: Any) -> None:
    """Set the value at a path (keys and list indexes) of a raw stack config, in place; `...`
    deletes it. Every step but the last must exist: a mistyped path fails the test's setup."""
    target = raw
    for key in path[:-1]:
        target = target[key]
    if value is ...:
        del target[path[-1]]
    else:
        target[path[-1]] = value


def write_stack(tmp_path: Path, raw: dict[str, Any], extra: dict[str, Any] | None = None) -> Path:
    """A stack file holding `raw` (project keys) plus `extra` (fully named keys)."""
    config = {f"{PROJECT}:{key}": value for key, value in raw.items()}
    config.update(extra or {})
    path = tmp_path / "Pulumi.test.yaml"
    path.write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    return path


def run_preview(*args: str, timeout: int = 180) -> subprocess.CompletedProcess[str]:
    """The offline preview as a user runs it: a separate process."""
    return subprocess.run(
        [sys.executable, "-m", "preview", "--quiet", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def load_json(path: Path) -> Any:
    return json.loads(path.read_text())


class PreviewRun:
    def __init__(self, stack: str, out: Path, result: subprocess.CompletedProcess[str]):
        self.stack, self.out, self.result = stack, out, result

    @property
    def resources(self) -> list[dict[str, Any]]:
        return load_json(self.out / "resources.json")

    @property
    def report(self) -> dict[str, Any]:
        return load_json(self.out / "report.json")

    def manifests(self) -> list[dict[str, Any]]:
        return [yaml.safe_load(p.read_text()) for p in sorted((self.out / "manifests").rglob("*.yaml"))]

    def objects(self, kind: str, api_version: str | None = None) -> list[dict[str, Any]]:
        return [m for m in self.manifests() if m["kind"] == kind and (api_version is None or m["apiVersion"] == api_version)]

    def of_type(self, token: str) -> list[dict[str, Any]]:
        return [r for r in self.resources if r["type"] == token]


def stack_config_from_raw(
    raw: dict[str, Any], extra: dict[str, Any] | None = None, secrets: dict[str, str] | None = None, stack: str = "test"
):
    """The config the CLI would hand the program for these keys (strings, JSON for objects);
    `secrets` are fully named keys whose values are marked secret."""
    from preview.stack_config import StackConfig, _to_config_string

    values = {f"{PROJECT}:{key}": _to_config_string(value) for key, value in raw.items()}
    values.update({key: _to_config_string(value) for key, value in (extra or {}).items()})
    values.update(secrets or {})
    return StackConfig(project=PROJECT, stack=stack, values=values, secret_keys=list(secrets or {}))


def _evaluation(raw: dict[str, Any], extra: dict[str, Any] | None, secrets: dict[str, str] | None) -> Any:
    """The program under the mock engine; registry versions resolved from the stack's lock file, as the preview
    resolves them (preview/registry_resolution.py committed_lock), unless the test names a recording itself."""
    from platform_config.registry import REGISTRY_FILE_ENV
    from preview.cli import ProgramEnvironment, committed_lock
    from preview.engine import evaluate

    config = stack_config_from_raw(raw, extra, secrets)
    lock = committed_lock(ROOT, config)
    if lock is None or REGISTRY_FILE_ENV in os.environ:
        return evaluate(ROOT, config)
    with ProgramEnvironment({REGISTRY_FILE_ENV: str(lock)}):
        return evaluate(ROOT, config)


_EVALUATIONS: dict[str, Any] = {}


def _shared_evaluation(raw: dict[str, Any], extra: dict[str, Any] | None, secrets: dict[str, str] | None) -> Any:
    """The program run once per test process for the same keys (several modules' fixtures evaluate the same
    committed stack), each caller getting a copy of its own."""
    import copy

    key = json.dumps([raw, extra, secrets], sort_keys=True)
    if key not in _EVALUATIONS:
        _EVALUATIONS[key] = _evaluation(raw, extra, secrets)
    return copy.deepcopy(_EVALUATIONS[key])


class Evaluated:
    """The program evaluated in-process under the mock engine, for component-level assertions.
    `shared=True` (a module's fixture of a committed stack): see _shared_evaluation."""

    def __init__(
        self,
        raw: dict[str, Any],
        extra: dict[str, Any] | None = None,
        secrets: dict[str, str] | None = None,
        *,
        shared: bool = False,
    ):
        from preview.render import plain, resource_entries

        evaluation = _shared_evaluation(raw, extra, secrets) if shared else _evaluation(raw, extra, secrets)
        self.records = evaluation.resources
        self.outputs = evaluation.stack_outputs
        # As the preview writes them (resources.json), with the mock engine's outputs beside.
        self.resources = [
            {**entry, "outputs": plain(r.outputs)}
            for entry, r in zip(resource_entries(evaluation.resources), evaluation.resources, strict=True)
        ]

    def of_type(self, token: str) -> list[dict[str, Any]]:
        return [r for r in self.resources if r["type"] == token]

    def one(self, token: str, name: str) -> dict[str, Any]:
        found = [r for r in self.of_type(token) if r["name"] == name]
        assert len(found) == 1, (token, name, [r["name"] for r in self.of_type(token)])
        return found[0]

    def children(self, parent_type: str, parent_name: str) -> list[dict[str, Any]]:
        parent = self.one(parent_type, parent_name)
        return [r for r in self.resources if r["parent"] == parent["urn"]]

    def manifests(self) -> list[dict[str, Any]]:
        from preview.render import manifests

        return manifests(self.records)

    def k8s(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        found = [
            m
            for m in self.manifests()
            if m["kind"] == kind and m["metadata"]["name"] == name and m["metadata"].get("namespace") == namespace
        ]
        assert len(found) == 1, (kind, name, namespace)
        return found[0]


_SPLIT_MODULE_VALUES: dict[str, Any] = {}


def split_module_value(key: str, build: Callable[[], T]) -> T:
    """A module fixture's value built once per test process for the modules split from one module (`key` names the
    module and fixture it came from), so that they share one object as the one module's tests did, and build it no
    more often: read it, never change it."""
    if key not in _SPLIT_MODULE_VALUES:
        _SPLIT_MODULE_VALUES[key] = build()
    return _SPLIT_MODULE_VALUES[key]


# The upstream files the tests read at pinned tags, in place (../shared/upstream-sources:
# `<owner>+<name>/<tag>/<path>`, byte for byte as at the tag).
UPSTREAM_SOURCES = (ROOT.parent / "shared" / "upstream-sources").resolve()


def mirror_show(mirror: Path, tag: str, path: str) -> str:
    """An upstream repository's file at a tag, read in place from ../shared/upstream-sources
    (`mirror` names the repository, `<owner>+<name>`; no fetched mirror is read). A file that is not
    there fails the test, naming it, so it can be added."""
    repository = mirror.name
    source = UPSTREAM_SOURCES / repository / tag / path
    if not source.is_file():
        raise AssertionError(f"upstream file not in ../shared/upstream-sources: {repository}/{tag}/{path}")
    return source.read_text()


def vllm_release(pin: SourceReleasePin | None = None) -> SourceRelease:
    """vLLM's pinned source release (platform_config/pins.py VLLM_SOURCE, or another pinned one, downloaded by
    `make upstream-sources`). The test skips when the archive was not downloaded (pytest run without make); mark it
    `upstream_source` so that `.ci/run` fails instead (tests/conftest.py)."""
    import pytest

    from platform_config.pins import VLLM_SOURCE
    from preview.vllm_release import open_release

    wanted = pin or VLLM_SOURCE
    release = open_release(wanted)
    if release is None:
        pytest.skip(f"no vLLM source release {wanted.filename} in build/upstream-sources: `make upstream-sources`")
    return release


def pinned_vllm_flags() -> frozenset[str]:
    """The flags `vllm serve` takes at the pinned version, where the upstream stage reads them
    (preview/upstream.py vllm_serve_flags: the facts' list, else the pinned source release's parsers). Mark the
    test `upstream_source`: without the release (pytest run without make) it skips."""
    from platform_config.pins import VLLM_VERSION
    from preview.upstream import Facts, facts_dir, vllm_serve_flags

    vllm_release()
    found = vllm_serve_flags(Facts(facts_dir()), VLLM_VERSION)
    assert found is not None, f"no flags for vLLM {VLLM_VERSION} in the facts or its source release"
    return found[0]


def vllm_source(path: str) -> str:
    """A file of vLLM's pinned source release, e.g. `docker/Dockerfile`, read from the archive (`vllm_release`)."""
    return vllm_release().text(path)


def registry_recording(uri: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """A registry resolution file as a preview writes it (`--registry-file`), spelt out by hand so
    the reader is tested against the format, not against its own writer."""
    return {
        "format": "inference-platform/registry-resolution",
        "formatVersion": 1,
        "trackingUri": uri,
        "recordedAt": "2026-11-30T12:00:00Z",
        "entries": entries,
    }


def resolved_from_lock(
    raw: dict[str, Any], uri: str, entries: list[dict[str, Any]], project: Path, extra_checks: list[Any] | None = None
) -> tuple[Any, Any]:
    """A stack whose versions name the MLflow registry at `uri`, resolved as a production pull request previews it:
    from its lock file (`registry.lockFile`, a committed recording in the project's stacks/ folder, written here by
    hand with `entries`). Returns the resolved config and resolution; raises what the resolution raises."""
    from platform_config.loader import parse_platform_config
    from platform_config.registry import resolve_registry

    lock = "stacks/Pulumi.test.registry.json"
    (project / "stacks").mkdir(exist_ok=True)
    (project / lock).write_text(json.dumps(registry_recording(uri, entries)))
    raw["registry"] = {"trackingUri": uri, "lockFile": lock}
    config = parse_platform_config(raw, extra_checks or [])
    return resolve_registry(config, None, recording_file=str(project / lock), dry_run=True, project_dir=project)


def vllm_reads(headers: Any, body: bytes | str) -> dict[str, Any]:
    """A request as vLLM 0.33.0's generate endpoints read it: the body with Python's json.loads (the last of
    duplicate names counting: FastAPI's request model from Starlette's Request.json()), with `priority` as
    `_get_priority` takes it (vllm/entrypoints/generate/base/serving.py: `int()` of the X-Vllm-Priority header
    when that parses, else the body's, whose default is 0). `headers`: (name, value) pairs or a mapping."""
    pairs = headers.items() if hasattr(headers, "items") else headers
    read = json.loads(body)
    assert isinstance(read, dict)
    priority = read.get("priority", 0)
    header = next((value for name, value in pairs if name.lower() == "x-vllm-priority"), None)
    if header is not None:
        try:
            priority = int(header)
        except ValueError:
            pass
    return {**read, "priority": priority}


def schema_validator() -> Any:
    """The preview's schema validator for Kubernetes 1.33 and the CRD folder, built once per test process
    (preview/schemas.py validator_for): its schemas load once for every test that validates objects."""
    from preview.schemas import crd_schema_dir, validator_for

    return validator_for("1.33", str(crd_schema_dir()))


def evaluate_twins(program_text: str, samples: Any, tmp_path: Path, monkeypatch: Any) -> Any:
    """Evaluates a program that registers each sample two ways (tests/test_kubernetes_objects.py,
    tests/test_aws_objects.py), the samples in its TWIN_SAMPLES environment variable as JSON; its evaluation."""
    from preview.engine import evaluate

    program = tmp_path / "twins"
    program.mkdir()
    (program / "__main__.py").write_text(program_text)
    monkeypatch.setenv("TWIN_SAMPLES", json.dumps(samples))
    monkeypatch.syspath_prepend(str(ROOT))
    return evaluate(program, stack_config_from_raw({}))


def capture_requests(monkeypatch: Any) -> dict[str, Any]:
    """Each RegisterResource request the mock engine receives from here on, by the resource's name (a copy, as the SDK
    sent it): for comparing two registrations whole (tests/test_kubernetes_objects.py, tests/test_aws_objects.py)."""
    from preview.engine import RecordingMonitor

    requests: dict[str, Any] = {}
    register = RecordingMonitor.RegisterResource

    def recording(self: Any, request: Any) -> Any:
        requests[request.name] = type(request).FromString(request.SerializeToString())
        return register(self, request)

    monkeypatch.setattr(RecordingMonitor, "RegisterResource", recording)
    return requests
