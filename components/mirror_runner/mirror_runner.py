"""Copies one pinned Hugging Face revision into the weight mirror's S3 folder (platform_config/weight_mirror.py), file
by file, from the download straight into a multipart upload: nothing lands on the node's disk, whatever the
weights' size.

Runs in the platform's vLLM image, which has every module it imports: requests (vLLM 0.33.0's
requirements/common.txt), huggingface_hub (the same file: `huggingface_hub >= 1.31.0`, 1.31.0 in vLLM's lock; every
call below was written against 0.34.0's API and is not yet checked again at 1.31.0) and boto3 (through
runai-model-streamer-s3, which docker/Dockerfile's vllm-runtime-base stage installs for the streamer). Its
environment (components/specs/weight_mirror.py mirror_job): MIRROR_REPO, MIRROR_REVISION, MIRROR_DESTINATION (s3://bucket/prefix/<revision>/),
MIRROR_MARKER (s3://bucket/key written last), and HF_TOKEN for gated repositories.

Safe to run again: a folder whose marker names the same repository, revision and files is complete, and the Job
exits at once; otherwise the files are copied again, keys of the folder that are not among them are deleted (a folder
an earlier selection rule wrote must not keep a second checkpoint for vLLM to stream), and the marker is written last.
A file whose size or (for LFS files) SHA-256 differs from what Hugging Face lists is deleted and the pod fails (the
Job retries it). What no retry can mend exits with PERMANENT_FAILURE_EXIT_CODE, which the Job's podFailurePolicy
fails at once: a revision vLLM cannot stream, a repository or revision that does not exist, a gated repository the
tenant's token may not read.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from typing import Any, BinaryIO

# What vLLM 0.33.0 reads from an S3 folder: every *.safetensors at its top (runai_model_streamer 0.15.7
# safetensors_streamer.list_safetensors: "This function is not recursive"; vLLM's runai_streamer_loader.py
# _prepare_weights streams all it lists, without the index), and every other file but weights, in any subfolder, for
# the config and tokenizer (vllm/config/model.py maybe_pull_model_tokenizer_for_runai pulls everything but *.pt,
# *.safetensors, *.bin, *.tensors, *.pth). Other weight formats, safetensors in subfolders and Meta's original
# checkpoint (`original/`) would be copied, and pulled by every replica, for nothing; and where the revision has a
# safetensors index, only the files it maps are copied, or a consolidated checkpoint beside the shards (as some
# repositories ship) would be streamed twice.
VLLM_IGNORED_SUFFIXES = (".pt", ".safetensors", ".bin", ".tensors", ".pth")
SKIPPED_SUFFIXES = (*VLLM_IGNORED_SUFFIXES, ".gguf", ".onnx", ".h5", ".msgpack", ".ckpt")
SKIPPED_FOLDERS = ("original/",)
SAFETENSORS_INDEX = "model.safetensors.index.json"
# What no retry can mend: the Job fails at once (components/specs/weight_mirror.py podFailurePolicy).
PERMANENT_FAILURE_EXIT_CODE = 3
# Hugging Face's answers that a retry cannot change: no token or a refused one, no access, no such file or revision.
PERMANENT_HTTP_STATUSES = (401, 403, 404)
# The multipart upload's part, how many are uploaded at once and how many may wait in memory (s3transfer buffers up
# to max_in_memory_upload_chunks parts, 10 by default, plus one per reading thread: s3transfer/manager.py).
PART_BYTES = 64 * 2**20
UPLOAD_THREADS = 4
DOWNLOAD_TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class RepoEntry:
    """A file of the revision as Hugging Face lists it: its path, size and, for LFS files, SHA-256."""

    path: str
    size: int
    sha256: str | None


class PermanentFailure(Exception):
    """The revision cannot be streamed whatever the retries."""


def wanted(path: str, shards: set[str] | None) -> bool:
    """Whether vLLM reads the file from the mirror's folder; `shards`: the files the safetensors index maps, if any."""
    if path.endswith(".safetensors"):
        return "/" not in path and (shards is None or path in shards)
    return not path.endswith(SKIPPED_SUFFIXES) and not path.startswith(SKIPPED_FOLDERS)


def indexed_shards(index: str | bytes) -> set[str]:
    """The files a safetensors index (`weight_map`: tensor -> file) maps tensors to; a malformed index raises
    ValueError or KeyError, which no retry mends."""
    return set(json.loads(index)["weight_map"].values())


def files_to_copy(entries: list[RepoEntry], shards: set[str] | None) -> list[RepoEntry]:
    """The revision's files vLLM reads, failing where it has no safetensors to stream at its top, or its index maps
    tensors to files the revision does not have."""
    chosen = [e for e in entries if wanted(e.path, shards)]
    streamed = {e.path for e in chosen if e.path.endswith(".safetensors")}
    if not streamed:
        raise PermanentFailure("the revision has no *.safetensors at its top: vLLM's Run:ai streamer loader reads only those")
    if shards is not None and shards - streamed:
        raise PermanentFailure(f"{SAFETENSORS_INDEX} maps tensors to files the revision lacks: {sorted(shards - streamed)}")
    return chosen


def split_s3_uri(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def marker_text(repo: str, revision: str, files: list[RepoEntry]) -> str:
    """What a complete copy's marker holds: the revision and the files copied, so a copy made by another selection
    rule is not taken for complete."""
    return json.dumps({"repo": repo, "revision": revision, "files": sorted(e.path for e in files)}, sort_keys=True)


def stale_keys(existing: list[str], prefix: str, files: list[RepoEntry]) -> list[str]:
    """The keys under the folder's prefix that are not the files copied: left by an earlier selection rule."""
    copied = {prefix + e.path for e in files}
    return sorted(key for key in existing if key not in copied)


class HashingReader:
    """A file-like reader over a download that counts and hashes what passes through it."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.size = 0
        self.digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        chunk = self.raw.read(size)
        self.size += len(chunk)
        self.digest.update(chunk)
        return chunk


def mismatch(entry: RepoEntry, reader: HashingReader) -> str | None:
    """What differs between the copied bytes and Hugging Face's listing, if anything."""
    if reader.size != entry.size:
        return f"{entry.path}: copied {reader.size} bytes, Hugging Face lists {entry.size}"
    if entry.sha256 is not None and reader.digest.hexdigest() != entry.sha256:
        return f"{entry.path}: SHA-256 {reader.digest.hexdigest()} differs from Hugging Face's {entry.sha256}"
    return None


def main() -> int:  # pragma: no cover - needs Hugging Face and S3; its parts are tested one by one
    import boto3
    import requests
    from boto3.s3.transfer import TransferConfig
    from huggingface_hub import HfApi, hf_hub_url
    from huggingface_hub.hf_api import RepoFile
    from huggingface_hub.utils import RepositoryNotFoundError, RevisionNotFoundError, build_hf_headers

    repo, revision = os.environ["MIRROR_REPO"], os.environ["MIRROR_REVISION"]
    bucket, prefix = split_s3_uri(os.environ["MIRROR_DESTINATION"])
    marker_bucket, marker_key = split_s3_uri(os.environ["MIRROR_MARKER"])
    token = os.environ.get("HF_TOKEN") or None
    s3: Any = boto3.client("s3")
    headers = build_hf_headers(token=token)

    def download(path: str) -> Any:
        response = requests.get(
            hf_hub_url(repo, path, revision=revision), headers=headers, stream=True, timeout=DOWNLOAD_TIMEOUT_SECONDS
        )
        if response.status_code in PERMANENT_HTTP_STATUSES:
            raise PermanentFailure(f"{path}: Hugging Face answered {response.status_code}")
        response.raise_for_status()
        response.raw.decode_content = True
        return response

    def listed(in_bucket: str, key_prefix: str) -> list[str]:
        """Every key under `key_prefix` (the role lists only under the tenant's prefix, which these are)."""
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=in_bucket, Prefix=key_prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    try:
        # GatedRepoError is a RepositoryNotFoundError.
        listing = list(HfApi(token=token).list_repo_tree(repo, revision=revision, recursive=True))
        entries = [
            RepoEntry(item.path, item.size, item.lfs.sha256 if item.lfs is not None else None)
            for item in listing
            if isinstance(item, RepoFile)
        ]
        shards = None
        if any(e.path == SAFETENSORS_INDEX for e in entries):
            with download(SAFETENSORS_INDEX) as response:
                shards = indexed_shards(response.content)
        chosen = files_to_copy(entries, shards)
    except (PermanentFailure, RepositoryNotFoundError, RevisionNotFoundError, ValueError, KeyError) as failure:
        print(f"{repo}@{revision}: {failure}", file=sys.stderr)
        return PERMANENT_FAILURE_EXIT_CODE
    expected = marker_text(repo, revision, chosen)
    # Looked up by listing, not read blindly: the role lists only under the tenant's prefix, so reading a missing key
    # would answer AccessDenied rather than NoSuchKey.
    if (
        marker_key in listed(marker_bucket, marker_key)
        and s3.get_object(Bucket=marker_bucket, Key=marker_key)["Body"].read().decode() == expected
    ):
        print(f"{repo}@{revision} is already in s3://{bucket}/{prefix}")
        return 0
    transfer = TransferConfig(multipart_chunksize=PART_BYTES, max_concurrency=UPLOAD_THREADS)
    transfer.max_in_memory_upload_chunks = UPLOAD_THREADS
    for entry in chosen:
        try:
            with download(entry.path) as response:
                reader = HashingReader(response.raw)
                s3.upload_fileobj(reader, bucket, prefix + entry.path, Config=transfer)
        except PermanentFailure as failure:
            print(f"{repo}@{revision}: {failure}", file=sys.stderr)
            return PERMANENT_FAILURE_EXIT_CODE
        problem = mismatch(entry, reader)
        if problem is not None:
            s3.delete_object(Bucket=bucket, Key=prefix + entry.path)
            print(problem, file=sys.stderr)
            return 1
        print(f"copied {entry.path} ({entry.size} bytes)")
    for key in stale_keys(listed(bucket, prefix), prefix, chosen):
        s3.delete_object(Bucket=bucket, Key=key)
        print(f"deleted {key}: not a file of the revision vLLM reads")
    s3.put_object(Bucket=marker_bucket, Key=marker_key, Body=expected.encode())
    print(f"{repo}@{revision} is in s3://{bucket}/{prefix}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
