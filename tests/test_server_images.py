"""Which image a model server runs: in production a vLLM release (platform_config/checks/models.py
check_production_server_images, exit 2 naming the version's `image`), anywhere an image of an allowed repository (the
pack's pinned-images, exit 1); and the release the upstream stage reads an image's flags against."""

from __future__ import annotations

import json

import pytest

from platform_config.checks.models import vllm_release_version
from platform_config.pins import VLLM

from .helpers import config_problems, raw_stack, run_preview, validate, write_stack

ATTACKER = "ghcr.io/attacker/miner:v1"


@pytest.mark.parametrize(
    ("image", "version"),
    [
        (VLLM.image, VLLM.tag.removeprefix("v")),
        (f"docker.io/{VLLM.image}", VLLM.tag.removeprefix("v")),
        (f"{VLLM.image}@sha256:{'ab' * 32}", VLLM.tag.removeprefix("v")),
        # A mirror of Docker Hub's repository: an ECR pull-through cache, a registry with a port.
        (f"123456789012.dkr.ecr.us-east-1.amazonaws.com/docker-hub/{VLLM.image}", VLLM.tag.removeprefix("v")),
        (f"registry.example.com:5000/{VLLM.image}", VLLM.tag.removeprefix("v")),
        # Not a release of vLLM's own repository: no version, so no flags to check.
        (ATTACKER, None),
        ("docker.io/vllm/vllm-openai-miner:v0.33.0", None),
        ("ghcr.io/attacker/vllm-openai:v0.33.0", None),
        ("vllm/vllm-openai:nightly", None),
        ("vllm/vllm-openai:v0.33.0-patched", None),
        (f"vllm/vllm-openai@sha256:{'ab' * 32}", None),
    ],
)
def test_the_release_an_image_names(image, version):
    assert vllm_release_version(image) == version


def _with_image(stack: str, image: str) -> tuple[dict, int]:
    raw = raw_stack(stack)
    index = next(i for i, m in enumerate(raw["models"]) if not m.get("profile") == "embeddings")
    raw["models"][index]["versions"][0]["image"] = image
    return raw, index


def test_production_refuses_a_server_image_that_is_no_vllm_release_naming_the_key():
    raw, index = _with_image("prod", ATTACKER)
    (problem,) = config_problems(raw)
    assert problem.startswith(f"inference-platform:models[{index}].versions[0].image: '{ATTACKER}' is not a vLLM release")
    # A mirror's copy of the release is one.
    raw, _ = _with_image("prod", f"123456789012.dkr.ecr.us-east-1.amazonaws.com/docker-hub/{VLLM.image}")
    validate(raw)


def test_the_preview_refuses_an_image_of_anyones(tmp_path):
    """Through the real CLI: production stops at the config (exit 2, the key), elsewhere the pack refuses the
    repository on every pod that would pull it (exit 1, mandatory), never a traceback."""
    raw, index = _with_image("prod", ATTACKER)
    result = run_preview("--stack", "prod", "--config-file", str(write_stack(tmp_path, raw)), "--out", str(tmp_path / "p"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert f"inference-platform:models[{index}].versions[0].image: '{ATTACKER}'" in result.stderr
    raw, _ = _with_image("staging", ATTACKER)
    staging = tmp_path / "staging"
    staging.mkdir()
    out = tmp_path / "s"
    result = run_preview("--stack", "staging", "--config-file", str(write_stack(staging, raw)), "--out", str(out))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    diagnostics = json.loads((out / "report.json").read_text())["policies"]["data"]["diagnostics"]
    refused = [d for d in diagnostics if d["policy"] == "pinned-images" and "'ghcr.io/attacker/miner'" in d["message"]]
    assert refused and {d["level"] for d in refused} == {"mandatory"}
