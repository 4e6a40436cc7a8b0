"""What the batch job tests share (tests/test_batch_jobs.py, test_batch_runner.py, test_batch_job_adapters.py and the
modules that read Kueue's source or run a job's adapter): the shard runner and its stand-in engine, prod's config
and prod with a batch job running a LoRA adapter."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from .helpers import ROOT, owning, raw_stack, validate

RUNNER = ROOT / "components" / "batch_runner" / "batch_runner.py"
KUEUE_MIRROR = Path("kubernetes-sigs+kueue")  # read in ../shared/upstream-sources


def prod() -> dict[str, Any]:
    return copy.deepcopy(raw_stack("prod"))


# A stand-in for `vllm run-batch` (no GPU here): it reads `-i`, writes one OpenAI batch output
# line per request to `-o` as vLLM's BatchRequestOutput does (id, custom_id, response with
# status_code, request_id and body, error), logs each call, and fails once on a chunk whose input
# holds FAIL_ONCE_ID while the marker file exists.
STAND_IN_ENGINE = textwrap.dedent(
    """
    import json, os, sys
    args = sys.argv[1:]
    source, target = args[args.index("-i") + 1], args[args.index("-o") + 1]
    requests = [json.loads(line) for line in open(source) if line.strip()]
    with open(os.environ["ENGINE_LOG"], "a") as log:
        log.write(json.dumps([r["custom_id"] for r in requests]) + "\\n")
    marker = os.environ.get("FAIL_ONCE")
    if marker and os.path.exists(marker) and any(r["custom_id"] == os.environ["FAIL_ONCE_ID"] for r in requests):
        os.unlink(marker)
        sys.exit(3)
    with open(target, "w") as out:
        for n, r in enumerate(requests):
            answer = {"id": "chatcmpl-%d" % n, "object": "chat.completion", "model": r["body"]["model"],
                      "choices": [{"index": 0, "message": {"role": "assistant", "content": "label"}, "finish_reason": "stop"}]}
            drop = os.environ.get("DROP_ID") == r["custom_id"]
            if not drop:
                out.write(json.dumps({"id": "vllm-%s" % r["custom_id"], "custom_id": r["custom_id"],
                    "response": {"status_code": 200, "request_id": "vllm-batch-%d" % n, "body": answer}, "error": None}) + "\\n")
    """
)


def request(custom_id: str) -> str:
    body = {"model": "batch-labeller", "messages": [{"role": "user", "content": f"label {custom_id}"}]}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body})


class Shard:
    def __init__(self, tmp_path: Path, index: int, shard_lines: int, chunk_lines: int, total: int):
        self.tmp = tmp_path
        self.engine = tmp_path / "engine.py"
        self.engine.write_text(STAND_IN_ENGINE)
        self.log = tmp_path / "engine.log"
        self.output = tmp_path / "output"
        self.status = tmp_path / "status" / "exit"
        (tmp_path / "scratch").mkdir(exist_ok=True)
        self.env = {
            **os.environ,
            "JOB_COMPLETION_INDEX": str(index),
            "BATCH_SHARD_LINES": str(shard_lines),
            "BATCH_CHUNK_LINES": str(chunk_lines),
            "BATCH_TOTAL_LINES": str(total),
            "BATCH_INPUT_DIR": str(tmp_path / "input"),
            "BATCH_OUTPUT_DIR": str(self.output),
            "BATCH_SCRATCH_DIR": str(tmp_path / "scratch"),
            "BATCH_STATUS_FILE": str(self.status),
            "ENGINE_LOG": str(self.log),
        }
        self.index = index

    def write_input(self, files: dict[str, list[str]]) -> None:
        folder = self.tmp / "input"
        folder.mkdir(exist_ok=True)
        for name, lines in files.items():
            (folder / name).write_text("\n".join(lines) + "\n")

    def run(self, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(RUNNER), sys.executable, str(self.engine), "--model", "m"],
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )

    def chunks(self) -> list[Path]:
        return sorted((self.output / f"shard-{self.index:05d}").glob("chunk-*.jsonl"))

    def calls(self) -> list[list[str]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []


def with_adapter_job(adapter: str = "llama-3.1-8b-sql") -> dict[str, Any]:
    """prod, with the serving tenant (owner of llama-8b and its adapters) allowed a batch job on
    l4-batch, and `review-labels` moved to it, on llama-8b's weights, running `adapter`."""
    raw = copy.deepcopy(raw_stack("prod"))
    serving = next(t for t in raw["tenants"] if t["name"] == "serving")
    serving["batchQuota"] = {"l4-batch": {"gpu": 1, "cpu": "9", "memory": "49Gi"}}
    serving["experimentQuota"] = {"gpu": 1, "cpu": "13", "memory": "75Gi", "pods": 3}
    serving["quota"]["gpu"] += 1  # the experiment quota is within the tenant's quota
    base = next(m for m in raw["models"] if m["name"] == "llama-8b")
    batch_job = next(j for j in raw["batchJobs"] if j["name"] == "review-labels")
    batch_job["tenant"] = "serving"
    # Its input and output become the serving tenant's own.
    owning(raw, "serving", "s3://serving-batch")
    batch_job["input"]["s3Uri"] = batch_job["input"]["s3Uri"].replace("s3://team-b-batch", "s3://serving-batch")
    batch_job["output"] = batch_job["output"].replace("s3://team-b-batch", "s3://serving-batch")
    batch_job["model"]["source"] = copy.deepcopy(base["versions"][0]["source"])
    batch_job["model"]["servedModelName"] = "llama-8b-batch"
    batch_job["model"]["adapter"] = adapter
    return raw


def review_labels(raw: dict[str, Any]):  # type: ignore[no-untyped-def]
    return next(j for j in validate(raw).batch_jobs if j.name == "review-labels")
