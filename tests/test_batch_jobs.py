"""Batch jobs on Kueue: the queueing objects per tenant and pool, the Job and its pod, pausing as a
one-field change, the shard runner against the OpenAI batch format, and every config error."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from components.specs.batch_job import engine_command, job, runner_config_map
from components.specs.kueue import (
    BATCH_COHORT,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    TENANT_LOCAL_QUEUE,
    WORKLOAD_PRIORITIES,
    cluster_queue,
    local_queue,
    resource_flavor,
    workload_priority_classes,
)
from components.specs.tenancy import priority_classes
from platform_config.batch_jobs import shard_estimate_seconds
from platform_config.capacity import batch_queue_report
from platform_config.pins import KUEUE, KUEUE_API_VERSION

from .helpers import (
    ROOT,
    PreviewRun,
    config_problems,
    mirror_show,
    pinned_vllm_flags,
    raw_stack,
    run_preview,
    validate,
    vllm_source,
    write_stack,
)

RUNNER = ROOT / "components" / "batch_runner" / "batch_runner.py"
KUEUE_MIRROR = Path("kubernetes-sigs+kueue")  # read in ../shared/upstream-sources


def prod() -> dict[str, Any]:
    return copy.deepcopy(raw_stack("prod"))


def job_index(raw: dict[str, Any], name: str) -> int:
    return next(i for i, j in enumerate(raw["batchJobs"]) if j["name"] == name)


def tenant_index(raw: dict[str, Any], name: str) -> int:
    return next(i for i, t in enumerate(raw["tenants"]) if t["name"] == name)


# --- Kueue's objects ------------------------------------------------------------------------


def test_each_batch_pool_is_a_flavor_with_its_nodes_labels_and_taint():
    plan = validate(prod())
    (pool,) = [p for p in plan.config.node_pools if p.name == "l4-batch"]
    flavor = resource_flavor(pool)
    assert flavor["apiVersion"] == KUEUE_API_VERSION == "kueue.x-k8s.io/v1beta2"
    assert flavor["metadata"]["name"] == "l4-batch"
    assert flavor["spec"]["nodeLabels"] == {"inference.platform/pool": "l4-batch"}
    assert flavor["spec"]["nodeTaints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


def test_a_jobs_pods_fit_their_pools_flavor_as_kueue_matches_them():
    """Kueue gives a pod set a flavor whose nodeLabels its nodeSelector does not contradict and
    whose nodeTaints it tolerates (apis/kueue/v1beta2/resourceflavor_types.go)."""
    plan = validate(prod())
    for job_plan in plan.batch_jobs:
        flavor = resource_flavor(job_plan.pool)["spec"]
        pod = job(job_plan)["spec"]["template"]["spec"]
        for key, value in flavor["nodeLabels"].items():
            assert pod["nodeSelector"].get(key, value) == value
        for taint in flavor["nodeTaints"]:
            assert any(
                t["key"] == taint["key"] and t["effect"] == taint["effect"] and t["operator"] == "Exists"
                for t in pod["tolerations"]
            )


def test_a_cluster_queue_per_tenant_from_its_batch_quota_in_one_cohort():
    raw = prod()
    raw["tenants"][tenant_index(raw, "team-b")]["batchQuota"]["l4-batch"]["gpu"] = 3
    raw["tenants"][tenant_index(raw, "team-b")]["experimentQuota"]["gpu"] = 4
    plan = validate(raw)
    queues = {t.name: cluster_queue(t.name, plan.batch_queues) for t in plan.config.tenants if t.batch_quota}
    assert sorted(queues) == ["team-a", "team-b"]
    for queue in queues.values():
        spec = queue["spec"]
        assert spec["cohortName"] == BATCH_COHORT
        assert spec["preemption"]["reclaimWithinCohort"] == "Any"
        assert spec["preemption"]["borrowWithinCohort"] == {"policy": "LowerPriority"}
        (group,) = spec["resourceGroups"]
        assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
        for flavor in group["flavors"]:
            assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]
    (team_b,) = queues["team-b"]["spec"]["resourceGroups"][0]["flavors"]
    gpu = {r["name"]: r for r in team_b["resources"]}["nvidia.com/gpu"]
    # The nominal quota is the stack's batch quota; borrowing is what the experiment quota leaves (4 - 3).
    assert (team_b["name"], gpu["nominalQuota"], gpu["borrowingLimit"]) == ("l4-batch", "3", "1")
    cpu = {r["name"]: r for r in team_b["resources"]}["cpu"]
    assert (cpu["nominalQuota"], cpu["borrowingLimit"]) == ("17", "9")
    # A tenant without a batch quota gets no queue; only its own namespace may use a queue.
    assert queues["team-a"]["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}


def test_batch_priorities_sit_below_every_serving_priority_class():
    serving = {c["metadata"]["name"]: c["value"] for c in priority_classes()}
    workload = {c["metadata"]["name"]: c["value"] for c in workload_priority_classes()}
    assert workload == WORKLOAD_PRIORITIES
    assert workload["batch"] < workload["experiment"] <= serving["inference-experiment"] < serving["inference-production"]


def test_the_job_is_indexed_queued_and_leaves_suspend_to_kueue():
    plan = validate(prod())
    by_name = {j.name: j for j in plan.batch_jobs}
    manifest = job(by_name["ticket-labels"])
    labels, spec = manifest["metadata"]["labels"], manifest["spec"]
    assert labels[QUEUE_NAME_LABEL] == "batch-ticket-labels" == local_queue(by_name["ticket-labels"].job)["metadata"]["name"]
    assert labels[PRIORITY_CLASS_LABEL] == "batch"
    # 120,000 lines in shards of 10,000.
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 12, 2)
    assert "suspend" not in spec
    assert spec["activeDeadlineSeconds"] == 12 * 3600
    assert manifest["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    pod = spec["template"]["spec"]
    assert pod["priorityClassName"] == "inference-experiment" and pod["restartPolicy"] == "Never"
    assert [c["name"] for c in pod["containers"]] == ["runner", "uploader"]
    runner = pod["containers"][0]
    assert runner["resources"]["limits"]["nvidia.com/gpu"] == "1"
    # Prod's weight mirror copied the job's Hugging Face model: `fetch-weights` copies it from S3, the engine loads it
    # from there, offline (test_weight_mirror.py holds the copy).
    (fetch,) = [c for c in pod["initContainers"] if c["name"] == "fetch-weights"]
    assert runner["args"][:4] == ["vllm", "run-batch", "--model", fetch["command"][-1]]
    assert "--revision" not in runner["args"] and "-i" not in runner["args"]
    # The ConfigMap ships the very runner the tests below run.
    assert runner_config_map(by_name["ticket-labels"])["data"]["batch_runner.py"] == RUNNER.read_text()


@pytest.mark.upstream_source
def test_the_engine_flags_are_flags_of_the_pinned_vllm():
    from preview.upstream import flags_of

    known = pinned_vllm_flags()
    for job_plan in validate(prod()).batch_jobs:
        assert set(flags_of(engine_command(job_plan))) <= known


def test_the_kueue_pin_is_the_chart_the_facts_know():
    facts = ROOT.parent / "shared" / "upstream-facts" / "charts" / "kueue" / f"{KUEUE.version}.json"
    if not facts.exists():
        pytest.skip("no upstream facts for the Kueue chart")
    assert json.loads(facts.read_text())["appVersion"] == f"v{KUEUE.version}"
    assert KUEUE.repo == "oci://registry.k8s.io/kueue/charts"


def test_kueue_stores_the_api_version_we_write():
    crd = mirror_show(KUEUE_MIRROR, f"v{KUEUE.version}", "config/components/crd/bases/kueue.x-k8s.io_clusterqueues.yaml")
    import yaml

    versions = yaml.safe_load(crd)["spec"]["versions"]
    stored = [v["name"] for v in versions if v["storage"]]
    assert f"kueue.x-k8s.io/{stored[0]}" == KUEUE_API_VERSION


def test_kueue_undoes_a_user_suspend_on_an_admitted_job_so_pausing_stops_the_queue():
    """Why `paused` is the LocalQueue's stopPolicy and not the Job's suspend, read at the pinned tag."""
    tag = f"v{KUEUE.version}"
    reconciler = mirror_show(KUEUE_MIRROR, tag, "pkg/controller/jobframework/reconciler.go")
    assert 'log.V(2).Info("Job admitted, unsuspending")' in reconciler
    workload = mirror_show(KUEUE_MIRROR, tag, "pkg/controller/core/workload_controller.go")
    assert "kueue.WorkloadEvictedByLocalQueueStopped" in workload and "kueue.HoldAndDrain" in workload


# --- pause and resume ----------------------------------------------------------------------


def test_pausing_a_job_changes_one_field_in_the_preview(tmp_path):
    raw = prod()
    index = job_index(raw, "ticket-labels")
    before = tmp_path / "before"
    before.mkdir()
    first = run_preview("--stack", "test", "--config-file", str(write_stack(before, raw)), "--out", str(before / "out"))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    raw["batchJobs"][index]["paused"] = True
    after = tmp_path / "after"
    after.mkdir()
    second = run_preview(
        "--stack",
        "test",
        "--config-file",
        str(write_stack(after, raw)),
        "--out",
        str(after / "out"),
        "--baseline",
        str(before / "out"),
    )
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    changes = PreviewRun("test", after / "out", second).report["changes"]["data"]
    assert not changes["added"] and not changes["removed"]
    (changed,) = changes["changed"]
    assert changed["urn"].endswith("::ticket-labels-queue") and changed["type"] == "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue"
    assert changed["paths"] == ["spec.stopPolicy"]
    (queue,) = [
        m
        for m in PreviewRun("test", after / "out", second).objects("LocalQueue")
        if m["metadata"]["name"] == "batch-ticket-labels"
    ]
    assert queue["spec"]["stopPolicy"] == "HoldAndDrain"


# --- the shard runner ----------------------------------------------------------------------

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


# --- quotas and the report -----------------------------------------------------------------


def test_the_report_shows_nominal_borrowable_and_reclaimable_gpus_per_pool():
    (row,) = batch_queue_report(validate(prod()).batch_queues)
    assert (row["pool"], row["resource"], row["supply"], row["nominal"]) == ("l4-batch", "nvidia.com/gpu", 16, 3)
    # team-b: 2 of its own, 1 more borrowable (its experiment quota's headroom, team-a's idle
    # GPU); team-a: 1, nothing borrowable (its experiment quota is all batch quota).
    assert row["byTenant"] == {
        "team-a": {"nominal": 1, "borrowable": 0, "reclaimable": 1},
        "team-b": {"nominal": 2, "borrowable": 1, "reclaimable": 2},
    }


def test_the_namespace_quotas_admit_every_job_at_its_parallelism(previews):
    run = previews["prod"]
    assert run.result.returncode == 0, run.result.stdout[-3000:]
    report = run.report
    rows = {r["workload"]: r for r in report["admission"]["data"]["workloads"]}
    jobs = [name for name in rows if name.startswith("Job team-b/batch-")]
    assert sorted(jobs) == ["Job team-b/batch-review-labels", "Job team-b/batch-ticket-labels"]
    assert all(not rows[name]["findings"] and rows[name]["placedPods"] == rows[name]["peakPods"] for name in jobs)
    assert rows["Job team-b/batch-ticket-labels"]["peakPods"] == 2
    assert report["batchQueues"]["data"][0]["byTenant"]["team-b"]["nominal"] == 2


def test_each_tenant_with_a_batch_quota_has_its_own_queue_in_its_namespace(previews):
    """Besides each job's queue, a LocalQueue `batch` per tenant with a batch budget, feeding its
    ClusterQueue, for the work its members submit."""
    run = previews["prod"]
    queues = {(q["metadata"]["namespace"], q["metadata"]["name"]): q["spec"] for q in run.objects("LocalQueue")}
    tenants = {t.name for t in validate(raw_stack("prod")).config.tenants if t.batch_quota}
    assert tenants == {"team-a", "team-b"}
    for tenant in tenants:
        assert queues[(tenant, TENANT_LOCAL_QUEUE)] == {"clusterQueue": tenant, "stopPolicy": "None"}
    # Every Job in a tenant's namespace (the weight mirror's copies run in the platform's own).
    tenant_namespaces = {t.name for t in validate(raw_stack("prod")).config.tenants}
    jobs = {
        (j["metadata"]["namespace"], j["metadata"]["labels"][QUEUE_NAME_LABEL])
        for j in run.objects("Job")
        if j["metadata"]["namespace"] in tenant_namespaces
    }
    assert jobs and jobs <= set(queues) and not {name for _, name in jobs} & {TENANT_LOCAL_QUEUE}


# --- config errors -------------------------------------------------------------------------


def test_a_job_on_a_pool_its_tenant_may_not_use():
    raw = prod()
    raw["batchJobs"][0]["pool"] = "h100"
    problems = config_problems(raw)
    assert "inference-platform:batchJobs[0].pool: tenant 'team-b' may only use pools l4-batch, not 'h100'" in problems


@pytest.mark.parametrize(
    ("input_", "message"),
    [
        ({"s3Uri": "s3://team-b-batch/inputs/tickets"}, "the input is not pinned"),
        ({"s3Uri": "s3://team-b-batch/inputs/tickets", "revision": "latest"}, "'latest' is not pinned"),
        (
            {"huggingface": "team-b/tickets", "revision": "main", "files": ["train.jsonl"]},
            "'main' is not pinned: give the 40-character",
        ),
    ],
)
def test_an_input_that_is_not_pinned(input_, message):
    raw = prod()
    raw["batchJobs"][0]["input"] = input_
    (problem,) = [p for p in config_problems(raw) if p.startswith("inference-platform:batchJobs[0].input.revision: ")]
    assert message in problem


def test_a_pinned_dataset_input_is_read_by_the_runner():
    raw = prod()
    raw["batchJobs"][0]["input"] = {"huggingface": "team-b/tickets", "revision": "a" * 40, "files": ["data/train.jsonl"]}
    # Production refuses it: its pods download nothing from Hugging Face, and the weight mirror copies no dataset.
    (refused,) = [p for p in config_problems(copy.deepcopy(raw)) if p.startswith("inference-platform:batchJobs[0].input")]
    assert refused.startswith("inference-platform:batchJobs[0].input.huggingface: is a Hugging Face dataset")
    assert "give 'input.s3Uri'" in refused
    raw["environment"] = "staging"
    job_plan = validate(raw).batch_jobs[0]
    pod = job(job_plan)["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert (env["BATCH_INPUT_HF_REPO"], env["BATCH_INPUT_HF_REVISION"]) == ("team-b/tickets", "a" * 40)
    assert json.loads(env["BATCH_INPUT_FILES"]) == ["data/train.jsonl"] and "BATCH_INPUT_DIR" not in env
    # It reaches the Hub for its input: not offline.
    assert "HF_HUB_OFFLINE" not in env
    # Only the shard's finished chunks are staged in.
    (stage_in,) = [c for c in pod["initContainers"] if c["name"] == "stage-in"]
    assert "--include '*.jsonl'" not in stage_in["command"][2]


def test_parallelism_above_the_tenants_batch_quota():
    raw = prod()
    raw["batchJobs"][0]["parallelism"] = 3
    problems = config_problems(raw)
    assert (
        "inference-platform:batchJobs[0].parallelism: 3 shards x 1 nvidia.com/gpu = 3, more than "
        "inference-platform:tenants[2].batchQuota.l4-batch.gpu (2): lower parallelism to 2 or raise the batch quota"
    ) in problems


def test_a_deadline_shorter_than_one_shards_estimate():
    raw = prod()
    raw["batchJobs"][0]["deadline"] = "1h"
    job_config = validate(prod()).config.batch_jobs[0]
    # 10,000 lines x 800 tokens / 2,000 tokens/s.
    assert shard_estimate_seconds(job_config) == 10_000 * 800 / 2_000 == 4000
    assert (
        "inference-platform:batchJobs[0].deadline: 1h is shorter than one shard's estimate: "
        "10000 lines x 800 tokens / 2000 tokens/s = 4000 s"
    ) in config_problems(raw)
    raw["batchJobs"][0]["deadline"] = f"{math.ceil(4000 / 60)}m"
    validate(raw)


def test_a_batch_quota_beyond_the_experiment_quota_or_on_a_foreign_pool():
    raw = prod()
    team_b = tenant_index(raw, "team-b")
    raw["tenants"][team_b]["batchQuota"]["l4-batch"]["gpu"] = 4
    raw["tenants"][team_b]["batchQuota"]["h100"] = {"gpu": 1}
    problems = config_problems(raw)
    assert f"inference-platform:tenants[{team_b}].batchQuota.h100: tenant 'team-b' may only use pools l4-batch" in problems
    assert any(
        p.startswith(f"inference-platform:tenants[{team_b}].batchQuota: batch quotas add up to 4 of nvidia.com/gpu")
        and "experimentQuota.gpu (3)" in p
        for p in problems
    )


def test_a_batch_job_needs_eks():
    """Its pods write to S3 with a workload role of their own, which a kubeconfig cluster has not."""
    raw = prod()
    raw["cluster"] = {"name": "existing", "mode": "kubeconfig"}
    assert any(p.startswith("inference-platform:batchJobs[0]") and "needs cluster.mode 'eks'" in p for p in config_problems(raw))


def test_a_jobs_workload_role_reads_its_input_and_writes_only_its_output(previews):
    from components.batch_job import batch_job_policy

    job_plan = next(j for j in validate(prod()).batch_jobs if j.name == "ticket-labels")
    statements = json.loads(batch_job_policy(job_plan))["Statement"]
    objects = {s["Resource"]: s["Action"] for s in statements if s["Action"] != ["s3:ListBucket"]}
    assert objects == {
        "arn:aws:s3:::team-b-batch/inputs/tickets/2026-11-30/*": ["s3:GetObject"],
        # The weight mirror's copy of its model, under team-b's own part of the mirror.
        "arn:aws:s3:::inference-prod-model-weights/team-b/Qwen/Qwen2.5-7B-Instruct/a09a35458c702b33eeacc393d103063234e8bc28/*": [
            "s3:GetObject"
        ],
        "arn:aws:s3:::team-b-batch/outputs/ticket-labels/2026-11-30/*": ["s3:GetObject", "s3:PutObject"],
    }
    # The same document is the role's policy in the preview, and the pod runs as its service account.
    policies = [
        r for r in previews["prod"].of_type("aws:iam/rolePolicy:RolePolicy") if r["name"] == "ticket-labels-identity-policy"
    ]
    assert [json.loads(p["inputs"]["policy"])["Statement"] for p in policies] == [statements]
    (manifest,) = [m for m in previews["prod"].objects("Job") if m["metadata"]["name"] == "batch-ticket-labels"]
    assert manifest["spec"]["template"]["spec"]["serviceAccountName"] == "batch-ticket-labels"


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
