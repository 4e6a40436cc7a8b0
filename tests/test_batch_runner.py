"""A batch job's shard runner against the OpenAI batch format, with a stand-in for `vllm run-batch` (its slice of the
input, resuming, the output, vLLM's format rules at the pinned tag), and the pod's S3 copies run for real by sh
with a stand-in `aws`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .batch_helpers import RUNNER, Shard, prod, request
from .helpers import validate, vllm_source

# --- the shard runner ----------------------------------------------------------------------


def test_a_shard_is_its_slice_of_the_input_lines_across_files(tmp_path):
    shard = Shard(tmp_path, index=1, shard_lines=4, chunk_lines=3, total=10)
    # Blank lines do not count (vLLM's batch runner skips them too); files are read in name order.
    shard.write_input(
        {"a.jsonl": [request(f"r{i}") for i in range(3)] + [""], "b.jsonl": [request(f"r{i}") for i in range(3, 10)]}
    )
    result = shard.run()
    assert result.returncode == 0, result.stderr
    assert shard.calls() == [["r4", "r5", "r6"], ["r7"]]
    assert [p.name for p in shard.chunks()] == ["chunk-00000.jsonl", "chunk-00001.jsonl"]
    assert shard.status.read_text() == "0"


def test_a_stopped_shard_resumes_without_redoing_finished_chunks(tmp_path):
    shard = Shard(tmp_path, index=0, shard_lines=6, chunk_lines=2, total=6)
    shard.write_input({"in.jsonl": [request(f"r{i}") for i in range(6)]})
    marker = tmp_path / "fail-once"
    marker.write_text("")
    failed = shard.run(FAIL_ONCE=str(marker), FAIL_ONCE_ID="r2")
    # The second chunk's engine failed: the first chunk is kept, the second never written.
    assert failed.returncode == 1 and "exited with 3" in failed.stderr
    assert [p.name for p in shard.chunks()] == ["chunk-00000.jsonl"] and shard.status.read_text() == "1"
    resumed = shard.run()
    assert resumed.returncode == 0, resumed.stderr
    assert shard.calls() == [["r0", "r1"], ["r2", "r3"], ["r2", "r3"], ["r4", "r5"]]
    assert "chunk 0: done before, skipped" in resumed.stdout
    answered = [json.loads(line)["custom_id"] for p in shard.chunks() for line in p.read_text().splitlines()]
    assert answered == [f"r{i}" for i in range(6)]
    # No partial chunk is left to be uploaded.
    assert not list(shard.output.rglob("*.tmp"))


def test_the_runner_writes_the_openai_batch_output_format(tmp_path):
    shard = Shard(tmp_path, index=0, shard_lines=3, chunk_lines=3, total=3)
    shard.write_input({"in.jsonl": [request(f"r{i}") for i in range(3)]})
    assert shard.run().returncode == 0
    (chunk,) = shard.chunks()
    for line, custom_id in zip(chunk.read_text().splitlines(), ["r0", "r1", "r2"], strict=True):
        result = json.loads(line)
        assert set(result) == {"id", "custom_id", "response", "error"}
        assert result["custom_id"] == custom_id and result["error"] is None
        assert result["response"]["status_code"] == 200 and result["response"]["body"]["choices"]


def test_a_shard_does_not_resume_into_chunks_of_another_input(tmp_path):
    shard = Shard(tmp_path, index=0, shard_lines=2, chunk_lines=1, total=2)
    shard.write_input({"in.jsonl": [request("r0"), request("r1")]})
    first = json.dumps({"input": {"s3Uri": "s3://b/in", "revision": "v1"}})
    assert shard.run(BATCH_FINGERPRINT=first).returncode == 0
    again = shard.run(BATCH_FINGERPRINT=first)
    assert again.returncode == 0 and len(shard.calls()) == 2
    moved = shard.run(BATCH_FINGERPRINT=json.dumps({"input": {"s3Uri": "s3://b/in", "revision": "v2"}}))
    assert moved.returncode == 2 and "give the job a new output prefix" in moved.stderr
    assert len(shard.calls()) == 2


def test_the_fingerprint_changes_with_the_input_and_the_chunking():
    from components.specs.batch_job import fingerprint

    raw = prod()
    before = fingerprint(validate(raw).batch_jobs[0])
    raw["batchJobs"][0]["input"]["revision"] = "2026-12-01"
    moved_input = fingerprint(validate(raw).batch_jobs[0])
    raw["batchJobs"][0]["chunkLines"] = 500
    rechunked = fingerprint(validate(raw).batch_jobs[0])
    assert len({before, moved_input, rechunked}) == 3
    raw["batchJobs"][0]["parallelism"] = 1
    assert fingerprint(validate(raw).batch_jobs[0]) == rechunked


def test_an_engine_that_drops_a_request_fails_the_chunk(tmp_path):
    shard = Shard(tmp_path, index=0, shard_lines=2, chunk_lines=2, total=2)
    shard.write_input({"in.jsonl": [request("r0"), request("r1")]})
    result = shard.run(DROP_ID="r1")
    assert result.returncode == 1 and "1 answers for 2 requests" in result.stderr
    assert shard.chunks() == []


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "not JSON"),
        (json.dumps({"custom_id": "x", "method": "GET", "url": "/v1/chat/completions", "body": {}}), "method must be POST"),
        (
            json.dumps({"custom_id": "x", "method": "POST", "url": "/v1/models", "body": {}}),
            "is not one vLLM's batch runner serves",
        ),
        (json.dumps({"method": "POST", "url": "/v1/chat/completions", "body": {}}), "custom_id must be a non-empty string"),
        (request("r0"), "repeats within the shard"),
    ],
)
def test_a_line_that_is_not_a_batch_request_fails_the_shard_as_an_input_error(tmp_path, line, message):
    shard = Shard(tmp_path, index=0, shard_lines=2, chunk_lines=2, total=2)
    shard.write_input({"in.jsonl": [request("r0"), line]})
    result = shard.run()
    # Exit code 2: the Job's podFailurePolicy fails the index at once instead of retrying.
    assert result.returncode == 2 and message in result.stderr and "in.jsonl:2" in result.stderr
    assert shard.calls() == []


@pytest.mark.upstream_source
def test_the_runners_format_rules_are_vllms_at_the_pinned_tag():
    """BatchRequestInput (custom_id, method, url, body) and BatchRequestOutput (id, custom_id,
    response, error) in vLLM's source release 0.33.0, vllm/entrypoints/launchers/run_batch.py (moved there from
    vllm/entrypoints/openai/run_batch.py, 0.18.0's)."""
    source = vllm_source("vllm/entrypoints/launchers/run_batch.py")
    import ast

    fields: dict[str, list[str]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name in ("BatchRequestInput", "BatchRequestOutput"):
            fields[node.name] = [
                s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            ]
    assert fields["BatchRequestInput"] == ["custom_id", "method", "url", "body"]
    sys.path.insert(0, str(RUNNER.parent))
    try:
        import batch_runner  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    assert tuple(fields["BatchRequestOutput"]) == batch_runner.OUTPUT_KEYS
    for url in batch_runner.URLS:
        assert f'"{url}"' in source
    assert '"-i"' in source and '"-o"' in source


# --- the pod's S3 copies, run for real by sh with a stand-in `aws` --------------------------

# A stand-in for the aws CLI (no S3 here): `aws s3 sync [--only-show-errors] [--exclude P]
# [--include P] SRC DST` over local folders, s3://<bucket>/<key> being $FAKE_S3/<bucket>/<key>;
# filters as the CLI applies them (every file is included, then each filter in order, the last
# that matches wins). Each call is logged.
STAND_IN_AWS = textwrap.dedent(
    """\
    #!/usr/bin/env python3
    import fnmatch, os, shutil, sys
    args = sys.argv[1:]
    assert args[:2] == ["s3", "sync"], args
    args = [a for a in args[2:] if a != "--only-show-errors"]
    filters = []
    while args[0] in ("--exclude", "--include"):
        filters.append((args[0], args[1]))
        args = args[2:]
    source, target = args
    local = lambda p: os.path.join(os.environ["FAKE_S3"], p[5:]) if p.startswith("s3://") else p
    with open(os.environ["AWS_LOG"], "a") as log:
        log.write(" ".join(sys.argv[1:]) + "\\n")
    source, target = local(source), local(target)
    for root, _, files in os.walk(source):
        for name in files:
            relative = os.path.relpath(os.path.join(root, name), source)
            keep = True
            for kind, pattern in filters:
                if fnmatch.fnmatch(relative, pattern):
                    keep = kind == "--include"
            if keep:
                os.makedirs(os.path.dirname(os.path.join(target, relative)), exist_ok=True)
                shutil.copy(os.path.join(root, name), os.path.join(target, relative))
    """
)


class Pod:
    """The job's stage-in and uploader scripts as rendered, their /work folder moved into tmp_path."""

    def __init__(self, tmp_path: Path):
        from components.specs.batch_job import stage_in_container, uploader_container

        job_plan = next(j for j in validate(prod()).batch_jobs if j.name == "ticket-labels")
        self.work = tmp_path / "work"
        self.s3 = tmp_path / "s3"
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "aws").write_text(STAND_IN_AWS)
        (bin_dir / "aws").chmod(0o755)
        self.log = tmp_path / "aws.log"
        self.env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_S3": str(self.s3), "AWS_LOG": str(self.log)}
        self.env["JOB_COMPLETION_INDEX"] = "3"
        self.stage_in = stage_in_container(job_plan)["command"][2].replace("/work/", f"{self.work}/")
        self.uploader = uploader_container(job_plan)["command"][2].replace("/work/", f"{self.work}/")
        self.output = self.s3 / "team-b-batch" / "outputs" / "ticket-labels" / "2026-11-30" / "shard-00003"
        self.shard = self.work / "output" / "shard-00003"


def test_stage_in_brings_the_input_and_the_shards_finished_chunks(tmp_path):
    pod = Pod(tmp_path)
    inputs = pod.s3 / "team-b-batch" / "inputs" / "tickets" / "2026-11-30"
    inputs.mkdir(parents=True)
    (inputs / "a.jsonl").write_text(request("r0") + "\n")
    (inputs / "README.md").write_text("not input")
    pod.output.mkdir(parents=True)
    (pod.output / "chunk-00000.jsonl").write_text("{}\n")
    (pod.output.parent / "shard-00004").mkdir()
    (pod.output.parent / "shard-00004" / "chunk-00000.jsonl").write_text("{}\n")
    result = subprocess.run(["sh", "-ec", pod.stage_in], env=pod.env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (pod.work / "input").iterdir()) == ["a.jsonl"]
    # Its own shard's chunks only.
    assert sorted(p.name for p in pod.shard.iterdir()) == ["chunk-00000.jsonl"]


def test_the_uploader_copies_finished_chunks_and_exits_with_the_runners_code(tmp_path):
    pod = Pod(tmp_path)
    pod.shard.mkdir(parents=True)
    (pod.shard / "chunk-00000.jsonl").write_text("{}\n")
    (pod.shard / "chunk-00001.jsonl.tmp").write_text("partial")
    (pod.work / "status").mkdir()
    (pod.work / "status" / "runner-exit").write_text("2")
    result = subprocess.run(["sh", "-c", pod.uploader], env=pod.env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2, result.stderr
    assert sorted(p.name for p in pod.output.iterdir()) == ["chunk-00000.jsonl"]


def test_a_stopped_uploader_copies_once_more_before_it_exits(tmp_path):
    import signal
    import time

    pod = Pod(tmp_path)
    process = subprocess.Popen(["sh", "-c", pod.uploader], env=pod.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while not pod.log.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    # A chunk finished after the last periodic copy; then the pod is stopped (preempted, paused).
    (pod.shard / "chunk-00000.jsonl").write_text("{}\n")
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 143
    assert (pod.output / "chunk-00000.jsonl").exists()


def test_a_prefix_that_slipped_past_its_pattern_is_still_one_word_to_the_shell(tmp_path):
    """The scripts quote the configured output prefix, though its pattern admits no shell syntax: a
    value that reached the builder anyway (here built past validation) runs no command."""
    import dataclasses

    from components.specs.batch_job import stage_in_container, uploader_container

    job_plan = next(j for j in validate(prod()).batch_jobs if j.name == "ticket-labels")
    marker = tmp_path / "ran"
    hostile = job_plan.job.model_copy(update={"output": f"s3://team-b-batch/out/$(touch {marker})`touch {marker}`"})
    plan = dataclasses.replace(job_plan, job=hostile)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "aws").write_text('#!/bin/sh\nprintf "%s\\n" "$@" >> "$AWS_LOG"\n')
    (bin_dir / "aws").chmod(0o755)
    work = tmp_path / "work"
    (work / "status").mkdir(parents=True)
    (work / "status" / "runner-exit").write_text("0")
    log = tmp_path / "aws.log"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "AWS_LOG": str(log), "JOB_COMPLETION_INDEX": "3"}
    for container in (stage_in_container(plan), uploader_container(plan)):
        shell, flags, script = container["command"]
        result = subprocess.run(
            [shell, flags, script.replace("/work/", f"{work}/")], env=env, capture_output=True, text=True, timeout=30
        )
        assert result.returncode == 0, result.stderr
    assert not marker.exists()
    # The aws CLI got the prefix as one argument, the index expanded.
    assert f"s3://team-b-batch/out/$(touch {marker})`touch {marker}`/shard-00003/" in log.read_text().splitlines()
