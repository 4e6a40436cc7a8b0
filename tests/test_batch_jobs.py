"""Batch jobs on Kueue: the queueing objects per tenant and pool, the Job and its pod, pausing as a
one-field change, the queues in the report, and every config error. The shard runner and the pod's S3 copies, run
for real: tests/test_batch_runner.py."""

from __future__ import annotations

import copy
import json
import math
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

from .batch_helpers import KUEUE_MIRROR, RUNNER, prod
from .helpers import (
    ROOT,
    PreviewRun,
    config_problems,
    mirror_show,
    pinned_vllm_flags,
    raw_stack,
    run_preview,
    validate,
    write_stack,
)


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
    # Every quota the tenant states counts against its experiment share, the foreign pool's too (batch_budget, which
    # the batch queues' borrowing limits read as well): 4 on l4-batch and 1 on h100.
    assert any(
        p.startswith(f"inference-platform:tenants[{team_b}].batchQuota: batch quotas add up to 5 of nvidia.com/gpu")
        and "experimentQuota.gpu (3)" in p
        for p in problems
    )


def test_the_batch_budget_is_what_the_experiment_quota_leaves_and_the_queues_borrow_it():
    """batch_budget: team-b's batch quotas (l4-batch: 2 GPUs, 17 CPUs, 97Gi) against its experiment quota (3 GPUs, 26
    CPUs, 150Gi) leave 1 GPU, 9 CPUs and 53Gi, which its ClusterQueue may borrow; a MIG slice the experiment quota
    does not state it allows none of, CPU it does not state it does not limit."""
    from decimal import Decimal

    from platform_config.capacity import batch_budget, batch_queue_rows

    raw = prod()
    config = validate(raw).config
    team_b = config.tenants[tenant_index(raw, "team-b")]
    headroom = batch_budget(team_b)
    assert headroom.room("nvidia.com/gpu") == 1 and headroom.room("cpu") == 9
    assert headroom.room("memory") == Decimal(53 * 2**30)
    assert headroom.room("nvidia.com/mig-1g.10gb") == 0 and headroom.allowed("nvidia.com/mig-1g.10gb") == 0
    no_cpu = team_b.experiment_quota.model_copy(update={"cpu": None})
    unstated = batch_budget(team_b.model_copy(update={"experiment_quota": no_cpu}))
    assert unstated.room("cpu") is None and unstated.room("nvidia.com/gpu") == 1
    [row] = [r for r in batch_queue_rows(config) if r.tenant == "team-b"]
    assert row.borrowing_limit["nvidia.com/gpu"] == 1 and row.borrowing_limit["cpu"] == 9


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
