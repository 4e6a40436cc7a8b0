"""A batch job running a LoRA adapter of a model in models[]: the config rules, the pod (the
servers' adapter fetch and LoRA flags), the workload role, and the runner's model-name check."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from components.batch_job import batch_job_policy
from components.specs.batch_job import engine_command, fingerprint, job
from components.specs.vllm_parts import ADAPTERS_DIR

from .batch_helpers import Shard, request, review_labels, with_adapter_job
from .helpers import config_problems, pinned_vllm_flags, raw_stack, validate


def job_index(raw: dict[str, Any]) -> int:
    return next(i for i, j in enumerate(raw["batchJobs"]) if j["name"] == "review-labels")


def test_a_jobs_adapter_is_loaded_with_the_servers_lora_flags_and_fetched_at_its_pinned_revision():
    plan = review_labels(with_adapter_job())
    command = engine_command(plan)
    path = f"{ADAPTERS_DIR}/llama-3.1-8b-sql"
    tail = command[command.index("--enable-lora") :]
    assert tail[:9] == ["--enable-lora", "--lora-modules", f"llama-3.1-8b-sql={path}", "--max-loras", "1",
                        "--max-lora-rank", "32", "--max-cpu-loras", "1"]  # fmt: skip
    pod = job(plan)["spec"]["template"]["spec"]
    (fetch,) = [c for c in pod["initContainers"] if c["name"].startswith("fetch-adapter")]
    assert fetch["command"][-2:] == ["s3://inference-prod-adapters/llama-3.1-8b/sql/2026-09-14/", path]
    # The adapter lands on the volume the runner reads the models from.
    runner = next(c for c in pod["containers"] if c["name"] == "runner")
    models_mount = next(m["mountPath"] for m in runner["volumeMounts"] if m["name"] == "models")
    assert path.startswith(models_mount + "/") and {"name": "models", "mountPath": models_mount} in fetch["volumeMounts"]


def test_a_canaried_adapter_runs_its_stable_revision_under_the_adapters_name():
    plan = review_labels(with_adapter_job("llama-3.1-8b-support"))
    assert f"llama-3.1-8b-support={ADAPTERS_DIR}/llama-3.1-8b-support" in engine_command(plan)
    pod = job(plan)["spec"]["template"]["spec"]
    (fetch,) = [c for c in pod["initContainers"] if c["name"].startswith("fetch-adapter")]
    assert fetch["command"][-2] == "s3://inference-prod-adapters/llama-3.1-8b/support/2026-10-02/"  # r1, the stable


@pytest.mark.upstream_source
def test_the_jobs_lora_flags_are_flags_of_the_pinned_vllm():
    plan = review_labels(with_adapter_job())
    known = pinned_vllm_flags()
    flags = [a for a in engine_command(plan) if a.startswith("--")]
    assert {"--enable-lora", "--lora-modules", "--max-loras", "--max-lora-rank", "--max-cpu-loras"} <= set(flags)
    assert [f for f in flags if f not in known] == []


def test_the_workload_role_reads_the_adapters_s3_prefix_and_the_fingerprint_names_it():
    raw = with_adapter_job()
    plan = review_labels(raw)
    resources = [s["Resource"] for s in json.loads(batch_job_policy(plan))["Statement"]]
    assert "arn:aws:s3:::inference-prod-adapters/llama-3.1-8b/sql/2026-09-14/*" in resources
    other = review_labels(with_adapter_job("llama-3.1-8b-support"))
    # Chunks written with one adapter are never resumed with another.
    assert fingerprint(plan) != fingerprint(other)


def test_a_job_without_adapter_has_no_lora():
    plan = next(j for j in validate(copy.deepcopy(raw_stack("prod"))).batch_jobs if j.name == "review-labels")
    assert "--enable-lora" not in engine_command(plan)
    assert not [c for c in job(plan)["spec"]["template"]["spec"]["initContainers"] if "adapter" in c["name"]]


def test_an_unknown_adapter_is_refused_naming_the_key():
    raw = with_adapter_job("llama-3.1-8b-poetry")
    index = job_index(raw)
    (problem,) = config_problems(raw)
    assert problem.startswith(f"inference-platform:batchJobs[{index}].model.adapter: unknown adapter 'llama-3.1-8b-poetry'")
    assert "llama-3.1-8b-sql" in problem


def test_another_tenants_adapter_is_refused():
    raw = copy.deepcopy(raw_stack("prod"))
    index = job_index(raw)
    base = next(m for m in raw["models"] if m["name"] == "llama-8b")
    raw["batchJobs"][index]["model"]["source"] = copy.deepcopy(base["versions"][0]["source"])
    raw["batchJobs"][index]["model"]["adapter"] = "llama-3.1-8b-sql"  # the serving tenant's; the job is team-b's
    (problem,) = config_problems(raw)
    assert problem.startswith(
        f"inference-platform:batchJobs[{index}].model.adapter: adapter 'llama-3.1-8b-sql' belongs to tenant 'serving'"
    )


def test_an_adapter_on_other_base_weights_is_refused():
    raw = with_adapter_job()
    index = job_index(raw)
    raw["batchJobs"][index]["model"]["source"] = copy.deepcopy(raw["batchJobs"][0]["model"]["source"])  # Qwen
    (problem,) = config_problems(raw)
    assert problem.startswith(
        f"inference-platform:batchJobs[{index}].model.source: adapter 'llama-3.1-8b-sql' is trained on model 'llama-8b'"
    )


def test_an_unpinned_adapter_source_is_refused():
    raw = with_adapter_job()
    base = next(m for m in raw["models"] if m["name"] == "llama-8b")
    sql = next(a for a in base["adapters"] if a["name"] == "llama-3.1-8b-sql")
    sql["source"]["revision"] = "latest"
    problems = config_problems(raw)
    index = job_index(raw)
    assert any(
        p.startswith(f"inference-platform:batchJobs[{index}].model.adapter: adapter 'llama-3.1-8b-sql' is not pinned")
        for p in problems
    ), problems


# --- the runner, run for real ---------------------------------------------------------------


def adapter_request(custom_id: str, model: str) -> str:
    line = json.loads(request(custom_id))
    line["body"]["model"] = model
    return json.dumps(line)


def run_shard(tmp_path: Path, lines: list[str]):  # type: ignore[no-untyped-def]
    shard = Shard(tmp_path, index=0, shard_lines=len(lines), chunk_lines=len(lines), total=len(lines))
    shard.write_input({"in.jsonl": lines})
    engine = ["--model", "m", "--served-model-name", "batch-labeller", "--enable-lora",
              "--lora-modules", "labels-v2=/models/adapters/labels-v2", "--max-loras", "1"]  # fmt: skip
    import subprocess
    import sys

    from .batch_helpers import RUNNER

    result = subprocess.run(
        [sys.executable, str(RUNNER), sys.executable, str(shard.engine), *engine],
        env=shard.env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return shard, result


def test_the_runner_accepts_lines_naming_the_adapter_or_the_served_model(tmp_path):
    shard, result = run_shard(tmp_path, [adapter_request("a", "labels-v2"), adapter_request("b", "batch-labeller")])
    assert result.returncode == 0, result.stderr
    assert shard.calls() == [["a", "b"]]


def test_the_runner_refuses_a_line_naming_another_model(tmp_path):
    shard, result = run_shard(tmp_path, [adapter_request("a", "labels-v2"), adapter_request("b", "llama-3.1-8b-sql")])
    assert result.returncode == 2
    assert "in.jsonl:2: body.model 'llama-3.1-8b-sql' is not served by this job (batch-labeller, labels-v2)" in result.stderr
    assert shard.calls() == []
