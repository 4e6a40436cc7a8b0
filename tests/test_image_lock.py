"""Images by digest (`images.lockFile`): `platform_tools lock-images` asks a real registry (Debian's
docker-registry, distribution 2.8.2) what each image the stack renders points to and writes the lock; a preview with
it renders every pod's image as `<reference>@<digest>`; the pack's `image-digests` refuses a production stack pulling
by tag at its own level (mandatory), which only an offline preview without a lock lowers to advisory; a lock that is
no lock, or lacks an image, is refused naming `images.lockFile`."""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from platform_config.chart_images import chart_images
from platform_config.pins import AWS_CLI, ENDPOINT_PICKER, ENVOY_PROXY, VLLM

from .helpers import ROOT, PreviewRun, raw_stack, run_preview, write_stack
from .servers.image_registry import image_registry

DIGEST = "sha256:" + "ab" * 32
# The committed stacks' cluster version (the cluster autoscaler's image follows it).
KUBERNETES_VERSION = raw_stack("dev")["cluster"]["kubernetesVersion"]
# Where each pin's registry is asked in the test: one loopback registry standing in as a pull-through mirror of all
# of them (a digest names content, not a host).
PIN_REPOSITORIES = {
    VLLM.image: "vllm/vllm-openai",
    AWS_CLI.image: "aws-cli/aws-cli",
    ENDPOINT_PICKER.image: "llm-d/llm-d-router-endpoint-picker",
    ENVOY_PROXY.image: "envoyproxy/envoy",
}
# The charts' images, as the table names them: each under its path on its registry.
CHART_IMAGES = chart_images(KUBERNETES_VERSION)
CHART_REPOSITORIES = {image.reference: image.reference.split("/", 1)[1].rsplit(":", 1)[0] for image in CHART_IMAGES}
REGISTRIES = sorted({"docker.io", "ghcr.io", "public.ecr.aws"} | {image.reference.split("/")[0] for image in CHART_IMAGES})


def lock_images(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "platform_tools", "lock-images", "dev", "--project-dir", str(project), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def project_copy(tmp_path: Path) -> Path:
    """The project file and dev's stack file in a folder of their own, where the tool may write its lock."""
    project = tmp_path / "project"
    (project / "stacks").mkdir(parents=True)
    (project / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    (project / "stacks" / "Pulumi.dev.yaml").write_text((ROOT / "stacks" / "Pulumi.dev.yaml").read_text())
    return project


def mirror_flags(host: str) -> list[str]:
    return [
        *(flag for registry in REGISTRIES for flag in ("--mirror", f"{registry}={host}")),
        "--plain-http",
        host,
    ]


def preview_with_lock(tmp_path: Path, stack: str, lock: dict[str, Any] | str, *args: str) -> PreviewRun:
    """The stack previewed with `images.lockFile` naming `lock` (a document, or the text of one), written into the
    project's stacks/ folder for the run, as a committed lock would be, and removed after."""
    name = f"stacks/test-images-{os.getpid()}-{tmp_path.name}.json"  # pytest-xdist workers name their folders alike
    raw = copy.deepcopy(raw_stack(stack))
    raw["images"] = {"lockFile": name}
    (ROOT / name).write_text(lock if isinstance(lock, str) else json.dumps(lock))
    try:
        out = tmp_path / "preview"
        result = run_preview("--stack", stack, "--config-file", str(write_stack(tmp_path, raw)), "--out", str(out), *args)
    finally:
        (ROOT / name).unlink(missing_ok=True)
    return PreviewRun(stack, out, result)


def every_lock(digest: str = DIGEST) -> dict[str, Any]:
    images = dict.fromkeys([*PIN_REPOSITORIES, *CHART_REPOSITORIES], digest)
    return {"lockVersion": 1, "resolvedAt": "2026-12-04T10:00:00Z", "images": images}


def pod_images(out: Path) -> list[str]:
    """Every container image of every pod template the preview rendered, but the mesh's sidecar stubs (`auto`: the
    injector puts its own proxy image there)."""
    images = []
    for manifest in sorted((out / "manifests").rglob("*.yaml")):
        for document in yaml.safe_load_all(manifest.read_text()):
            images += list(_images(document))
    return images


def _images(value: Any):
    if isinstance(value, dict):
        for key in ("containers", "initContainers"):
            for container in value.get(key) or []:
                if isinstance(container, dict) and container.get("image") not in (None, "auto"):
                    yield container["image"]
        for inner in value.values():
            yield from _images(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _images(inner)


@pytest.mark.real_server
def test_the_lock_holds_what_the_registry_answers_and_every_pod_pulls_by_it(tmp_path):
    with image_registry(tmp_path) as registry:
        pushed = {
            reference: registry.push(repository, reference.rsplit(":", 1)[1])
            for reference, repository in {**PIN_REPOSITORIES, **CHART_REPOSITORIES}.items()
        }
        project = project_copy(tmp_path)
        result = lock_images(project, *mirror_flags(registry.host))
    assert result.returncode == 0, result.stderr
    lock = json.loads((project / "stacks" / "Pulumi.dev.images.json").read_text())
    # The index's digest (what the tag points to), one per image, as the registry stored what was pushed.
    assert lock["images"] == pushed and lock["lockVersion"] == 1
    assert "set images.lockFile to it" in result.stdout
    run = preview_with_lock(tmp_path, "dev", lock)
    assert run.result.returncode == 0, run.result.stderr[-3000:]
    images = pod_images(run.out)
    assert images and all("@sha256:" in image for image in images), images
    assert {image.split("@")[0]: image.split("@")[1] for image in images}.items() <= pushed.items()
    # Every chart the stack installs names its images' digests where its templates read them.
    releases = {
        (release["chart"].rsplit("/", 1)[-1], release["version"]): release["values"]
        for release in map(yaml.safe_load, map(Path.read_text, sorted((run.out / "helm").glob("*.yaml"))))
    }
    for image in CHART_IMAGES:
        values = releases.get((image.chart.chart, image.chart.version))
        if values is None:
            continue  # a chart dev does not install
        value = functools.reduce(lambda node, key: node[key], image.key.split("."), values)
        assert pushed[image.reference].removeprefix("sha256:") in value, (image.key, value)
    assert {"gpu-operator", "metrics-server"} <= {chart for chart, _ in releases}


@pytest.mark.real_server
def test_a_registry_that_does_not_answer_writes_nothing(tmp_path):
    with image_registry(tmp_path) as registry:
        registry.push("vllm/vllm-openai", VLLM.image.rsplit(":", 1)[1])  # the other three were never pushed
        project = project_copy(tmp_path)
        result = lock_images(project, *mirror_flags(registry.host))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "answered 404" in result.stderr and AWS_CLI.image in result.stderr
    assert list((project / "stacks").iterdir()) == [project / "stacks" / "Pulumi.dev.yaml"]


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--plain-http", "registry.example.com"], "--plain-http registry.example.com: only a loopback host"),
        (["--mirror", "docker.io"], "--mirror 'docker.io': give REGISTRY=HOST"),
        (["--out", "../elsewhere.json"], "--out '../elsewhere.json': give a .json file in the stack files' folder"),
        (["--timeout", "0"], "--timeout 0.0: give 1 to 120 seconds"),
    ],
)
def test_bad_flags_are_refused_naming_the_flag(tmp_path, flags, named):
    result = lock_images(project_copy(tmp_path), *flags)
    assert result.returncode == 2 and named in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_production_pulling_by_tag_is_refused_at_the_packs_own_level(tmp_path):
    """What `pulumi up` runs: the pack's level for image-digests (mandatory), not the offline preview's advisory."""
    config = tmp_path / "policy-config.json"
    config.write_text(json.dumps({"image-digests": {"enforcementLevel": "mandatory"}}))
    result = run_preview("--stack", "prod", "--out", str(tmp_path / "out"), "--policy-config", str(config))
    assert result.returncode == 1, result.stderr[-2000:]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    violations = [v for v in report["policies"]["data"]["diagnostics"] if v["policy"] == "image-digests"]
    assert violations and all(v["level"] == "mandatory" for v in violations)
    assert any(f"runs image '{VLLM.image}' by tag in production" in v["message"] for v in violations)
    # The charts' images too, named by the key that takes the digest.
    assert any(
        "release of chart gpu-operator runs nvcr.io/nvidia/k8s-device-plugin:v0.18.1" in v["message"]
        and "set devicePlugin.version to the digest" in v["message"]
        for v in violations
    ), [v["message"] for v in violations]


def test_a_locked_production_stack_passes_the_pack_at_its_own_level(tmp_path):
    run = preview_with_lock(tmp_path, "prod", every_lock())
    assert run.result.returncode == 0, run.result.stderr[-3000:]
    assert not [v for v in run.report["policies"]["data"]["diagnostics"] if v["policy"] == "image-digests"]
    assert all(image.endswith(f"@{DIGEST}") for image in pod_images(run.out))
    # The digest takes nothing from the upstream stage: each server's release is still read from its tag, and its
    # flags checked against that release.
    flags = [pin for pin in run.report["upstream"]["data"]["pins"] if pin["pin"].startswith("vllm flags of ")]
    assert flags and {pin["status"] for pin in flags} == {"verified"}, flags
    assert {pin["version"] for pin in flags} == {VLLM.tag.removeprefix("v")}


@pytest.mark.parametrize("production", [False, True])
def test_a_server_image_whose_release_cannot_be_told_fails_the_upstream_stage_in_production(production):
    from preview.upstream import Facts, check_vllm_container, facts_dir

    container = {"image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/team/vllm:v0.33.0-patched", "args": []}
    result = check_vllm_container(Facts(facts_dir()), "Deployment team-a/x", container, production)
    assert result.status == ("failed" if production else "unverified"), result
    assert "is not a vllm/vllm-openai release tag: flags unchecked" in result.details[0]


@pytest.mark.parametrize(
    ("lock", "named"),
    [
        ({**every_lock(), "images": {VLLM.image: DIGEST}}, f"does not hold {AWS_CLI.image} (the pinned aws CLI image)"),
        (every_lock("sha256:1234"), "is not an image lock: images."),
        ({**every_lock(), "lockVersion": 2}, "is not an image lock: lockVersion"),
        ({**every_lock(), "extra": 1}, "is not an image lock: extra"),
        ("{not json", "is not JSON"),
    ],
)
def test_a_lock_that_is_no_lock_or_lacks_an_image_is_refused_naming_the_key(tmp_path, lock, named):
    run = preview_with_lock(tmp_path, "dev", lock)
    assert run.result.returncode == 2, run.result.stdout[-2000:]
    assert "images.lockFile" in run.result.stderr and named in run.result.stderr, run.result.stderr[-2000:]
    assert "Traceback" not in run.result.stderr


@pytest.mark.parametrize(
    ("reference", "registry", "repository", "tag"),
    [
        # distribution/reference v0.6.0 normalize.go splitDockerDomain, case by case.
        ("vllm/vllm-openai:v0.33.0", "docker.io", "vllm/vllm-openai", "v0.33.0"),
        ("ubuntu:24.04", "docker.io", "library/ubuntu", "24.04"),
        ("index.docker.io/envoyproxy/envoy:v1", "docker.io", "envoyproxy/envoy", "v1"),
        ("localhost/team/model:v1", "localhost", "team/model", "v1"),
        ("registry.example.com:5000/team/vllm:v1", "registry.example.com:5000", "team/vllm", "v1"),
        ("Registry/team/vllm:v1", "Registry", "team/vllm", "v1"),
        ("public.ecr.aws/aws-cli/aws-cli:2.27.50", "public.ecr.aws", "aws-cli/aws-cli", "2.27.50"),
    ],
)
def test_a_reference_names_its_registry_as_docker_reads_it(reference, registry, repository, tag):
    from platform_tools.image_digests import ImageName, parse_reference

    assert parse_reference(reference) == ImageName(registry, repository, tag)


OTHER_DIGEST = "sha256:" + "cd" * 32


@pytest.mark.parametrize(
    ("image", "says"),
    [
        (
            f"{VLLM.image}@{OTHER_DIGEST}",
            f"names {OTHER_DIGEST}, but the image lock stacks/lock.json holds {DIGEST} for {VLLM.image}",
        ),
        (
            f"docker.io/attacker/miner:v1@{DIGEST}",
            "names its own digest, but the image lock stacks/lock.json does not hold docker.io/attacker/miner:v1",
        ),
        (f"vllm/vllm-openai@{DIGEST}", "names a digest without a tag, which the image lock stacks/lock.json cannot vouch for"),
    ],
    ids=["another-digest", "not-in-the-lock", "no-tag"],
)
def test_a_version_image_with_its_own_digest_is_held_to_the_lock(tmp_path, image, says):
    """A digest written by hand beside a tag would bypass the lock: with one, the lock must hold the tag with that
    very digest (a stack without a lock pulls the reference as written, the pack's image-digests rule judging it)."""
    from platform_config.errors import ConfigError
    from platform_config.image_lock import read_image_lock
    from platform_config.loader import parse_platform_config

    raw = copy.deepcopy(raw_stack("dev"))
    raw["images"] = {"lockFile": "stacks/lock.json"}
    raw["models"][0]["versions"][0]["image"] = image
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "lock.json").write_text(json.dumps(every_lock()))
    config = parse_platform_config(raw, [])
    with pytest.raises(ConfigError) as caught:
        read_image_lock(config, tmp_path)
    (issue,) = caught.value.issues
    assert str(issue).startswith("inference-platform:models[0].versions[0].image: ") and says in str(issue)


def test_a_version_image_with_the_digest_its_tag_has_in_the_lock_is_pulled_as_written(tmp_path):
    from platform_config.image_lock import read_image_lock
    from platform_config.loader import parse_platform_config

    raw = copy.deepcopy(raw_stack("dev"))
    raw["images"] = {"lockFile": "stacks/lock.json"}
    raw["models"][0]["versions"][0]["image"] = f"{VLLM.image}@{DIGEST}"
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "lock.json").write_text(json.dumps(every_lock()))
    lock = read_image_lock(parse_platform_config(raw, []), tmp_path)
    assert lock.pinned(f"{VLLM.image}@{DIGEST}") == f"{VLLM.image}@{DIGEST}"
