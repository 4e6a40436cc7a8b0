"""The weight mirror's config errors, and its runner (components/mirror_runner/mirror_runner.py): the files it copies
of a revision (what vLLM reads and streams, from the index), each copy checked against Hugging Face's listing, the
completion marker outside the streamed folder, the S3 calls its role allows, and its imports in the vLLM image."""

from __future__ import annotations

import hashlib
import io
import json
import re

import pytest

from components.mirror_runner import mirror_runner as runner
from components.specs.weight_mirror import RUNNER_SOURCE, mirror_write_policy
from platform_config import parse_platform_config
from platform_config.weight_mirror import (
    mirrored_revisions,
)

from .helpers import config_problems, raw_stack, run_preview, vllm_source, write_stack
from .weight_mirror_helpers import BUCKET, copy_of

# --- config errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mirror, key, says",
    [
        ({"bucket": "Has_Upper"}, "weightMirror.bucket", "is not an S3 bucket name"),
        ({"bucket": "dots.in.name"}, "weightMirror.bucket", "no dots"),
        (
            {"bucket": "ok-bucket", "s3GatewayEndpoint": {"routeTableIds": ["subnet-0abc12345"]}},
            "weightMirror.s3GatewayEndpoint.routeTableIds[0]",
            "is not a route table ID",
        ),
        (
            {"bucket": "ok-bucket", "s3GatewayEndpoint": {"routeTableIds": []}},
            "weightMirror.s3GatewayEndpoint.routeTableIds",
            "at least 1",
        ),
        ({"bucket": "ok-bucket", "region": "us-east-1"}, "weightMirror.region", "unknown key 'region'"),
    ],
)
def test_a_bad_mirror_key_is_named(prod_raw, mirror, key, says):
    prod_raw["weightMirror"] = mirror
    (problem,) = config_problems(prod_raw)
    assert problem.startswith(f"inference-platform:{key}: ") and says in problem, problem


def test_a_mirror_on_an_existing_cluster_is_refused_with_exit_2(tmp_path):
    raw = raw_stack("dev")
    raw["weightMirror"] = {"bucket": "dev-weights"}
    out = tmp_path / "out"
    result = run_preview("--stack", "test", "--config-file", str(write_stack(tmp_path, raw)), "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert "inference-platform:weightMirror: needs cluster.mode 'eks'" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()


# --- the runner -----------------------------------------------------------------------------

LLAMA_LISTING = [
    runner.RepoEntry(".gitattributes", 1519, None),
    runner.RepoEntry("LICENSE", 7627, None),
    runner.RepoEntry("config.json", 855, None),
    runner.RepoEntry("generation_config.json", 184, None),
    *(runner.RepoEntry(f"model-{i:05d}-of-00004.safetensors", 4_976_698_672, "ab" * 32) for i in range(1, 5)),
    runner.RepoEntry("consolidated.safetensors", 16_060_617_592, "cc" * 32),
    runner.RepoEntry("model.safetensors.index.json", 23950, None),
    runner.RepoEntry("original/consolidated.00.pth", 16_060_617_592, "cd" * 32),
    runner.RepoEntry("original/params.json", 199, None),
    runner.RepoEntry("original/tokenizer.model", 2_183_982, "ef" * 32),
    runner.RepoEntry("special_tokens_map.json", 296, None),
    runner.RepoEntry("tokenizer.json", 9_085_657, "01" * 32),
    runner.RepoEntry("tokenizer_config.json", 55351, None),
    runner.RepoEntry("1_Pooling/config.json", 190, None),
    runner.RepoEntry("onnx/model.onnx", 1_000_000, "23" * 32),
    runner.RepoEntry("pytorch_model.bin", 16_000_000_000, "45" * 32),
]


def test_the_runner_copies_what_vllm_reads_from_the_folder():
    shards = {f"model-{i:05d}-of-00004.safetensors" for i in range(1, 5)}
    chosen = [e.path for e in runner.files_to_copy(LLAMA_LISTING, shards)]
    assert chosen == [
        ".gitattributes",
        "LICENSE",
        "config.json",
        "generation_config.json",
        *(f"model-{i:05d}-of-00004.safetensors" for i in range(1, 5)),
        "model.safetensors.index.json",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "1_Pooling/config.json",
    ]
    # Without an index every top-level safetensors is copied, as vLLM streams every one it lists.
    assert "consolidated.safetensors" in [e.path for e in runner.files_to_copy(LLAMA_LISTING, None)]
    # A revision without safetensors at its top, or whose index maps a missing file, cannot stream: the Job fails
    # at once, naming why.
    with pytest.raises(runner.PermanentFailure, match="no \\*.safetensors at its top"):
        runner.files_to_copy([e for e in LLAMA_LISTING if not e.path.endswith(".safetensors")], None)
    with pytest.raises(runner.PermanentFailure, match="model-00005-of-00004.safetensors"):
        runner.files_to_copy(LLAMA_LISTING, shards | {"model-00005-of-00004.safetensors"})


def test_the_runner_reads_the_shards_from_the_index():
    weight_map = {"a.weight": "model-1.safetensors", "b.weight": "model-2.safetensors", "c.weight": "model-1.safetensors"}
    index = {"metadata": {"total_size": 1}, "weight_map": weight_map}
    assert runner.indexed_shards(json.dumps(index)) == {"model-1.safetensors", "model-2.safetensors"}


def test_the_runner_checks_each_copy_against_hugging_faces_listing():
    data = b"weights" * 1000
    good = runner.RepoEntry("model.safetensors", len(data), hashlib.sha256(data).hexdigest())
    reader = runner.HashingReader(io.BytesIO(data))
    while reader.read(4096):
        pass
    assert runner.mismatch(good, reader) is None
    assert "SHA-256" in (runner.mismatch(runner.RepoEntry("model.safetensors", len(data), "0" * 64), reader) or "")
    assert runner.mismatch(runner.RepoEntry("x", 7001, None), reader) == "x: copied 7000 bytes, Hugging Face lists 7001"


def test_a_copy_is_complete_only_for_the_same_files_and_keeps_no_others():
    shards = {f"model-{i:05d}-of-00004.safetensors" for i in range(1, 5)}
    now = runner.files_to_copy(LLAMA_LISTING, shards)
    before = runner.files_to_copy(LLAMA_LISTING, None)  # an earlier rule: no index, so the consolidated file too
    assert json.loads(runner.marker_text("org/name", "a" * 40, now))["files"] == sorted(e.path for e in now)
    assert runner.marker_text("org/name", "a" * 40, now) != runner.marker_text("org/name", "a" * 40, before)
    prefix = "serving/org/name/" + "a" * 40 + "/"
    existing = [prefix + e.path for e in before]
    assert runner.stale_keys(existing, prefix, now) == [prefix + "consolidated.safetensors"]
    assert runner.split_s3_uri("s3://" + BUCKET + "/" + prefix) == (BUCKET, prefix)


def test_the_marker_is_never_inside_the_folder_vllm_streams():
    config = parse_platform_config(raw_stack("prod"))
    for revision in mirrored_revisions(config):
        assert revision.marker.endswith(".complete") and not revision.marker.startswith(revision.folder)
        assert revision.folder == copy_of(f"{revision.repo}@{revision.revision}", revision.tenant)


def test_the_mirror_role_allows_every_s3_call_the_runner_makes():
    """Each boto3 call in the runner's source needs these actions (S3 API reference: ListObjectsV2 needs
    s3:ListBucket; upload_fileobj's multipart upload PutObject, and AbortMultipartUpload when it fails)."""
    needs = {
        "list_objects_v2": {"s3:ListBucket"},
        "get_object": {"s3:GetObject"},
        "put_object": {"s3:PutObject"},
        "delete_object": {"s3:DeleteObject"},
        "upload_fileobj": {"s3:PutObject", "s3:AbortMultipartUpload"},
    }
    source = RUNNER_SOURCE.read_text()
    calls = set(re.findall(r"\bs3\.(\w+)\(", source)) - {"get_paginator"} | set(re.findall(r'get_paginator\("(\w+)"\)', source))
    assert calls == set(needs)
    config = parse_platform_config(raw_stack("prod"))
    assert config.weight_mirror is not None
    statements = json.loads(mirror_write_policy(config.weight_mirror, "serving"))["Statement"]
    allowed = {action for s in statements for action in s["Action"]}
    assert set().union(*needs.values()) <= allowed
    # The marker's lookup lists a prefix the listing grant covers: the tenant's.
    (listing,) = [s for s in statements if s["Action"] == ["s3:ListBucket"]]
    for revision in mirrored_revisions(config):
        if revision.tenant == "serving":
            key = runner.split_s3_uri(revision.marker)[1]
            assert any(re.fullmatch(p.replace("*", ".*"), key) for p in listing["Condition"]["StringLike"]["s3:prefix"])


@pytest.mark.upstream_source
def test_the_runner_skips_exactly_the_weights_vllm_does_not_pull():
    """vllm/config/model.py at 0.18.0 maybe_pull_model_tokenizer_for_runai: for an S3 model, every file but these
    weight formats is pulled for the config and tokenizer; the runner skips the same formats (and copies the
    top-level safetensors, which the streamer reads)."""
    source = vllm_source("vllm/config/model.py")
    body = source[source.index("def maybe_pull_model_tokenizer_for_runai") :]
    ignored = re.search(r"ignore_pattern=\[([^\]]*)\]", body)
    assert ignored is not None
    patterns = re.findall(r'"\*(\.[a-z]+)"', ignored.group(1))
    assert tuple(patterns) == runner.VLLM_IGNORED_SUFFIXES
    assert set(runner.VLLM_IGNORED_SUFFIXES) <= set(runner.SKIPPED_SUFFIXES)


@pytest.mark.upstream_source
def test_the_runners_imports_are_in_the_vllm_image():
    """requests is a requirement of vLLM 0.18.0 itself (requirements/common.txt); huggingface_hub comes with
    transformers, boto3 with runai-model-streamer-s3 (tests/test_vllm_source.py checks both are in the image)."""
    common = vllm_source("requirements/common.txt")
    assert re.search(r"^requests\b", common, re.MULTILINE)
    imported = set(re.findall(r"^ +(?:import|from) (\w+)", RUNNER_SOURCE.read_text(), re.MULTILINE))
    assert imported == {"boto3", "requests", "huggingface_hub"}
