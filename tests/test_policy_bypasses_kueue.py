"""The ways around the policy pack through GPU Jobs outside Kueue (issue 12): a GPU Job, or a CronJob's, must be
queued in a local queue of its namespace; a Job without GPUs need not be."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from preview.engine import RecordedResource

from . import policy_helpers
from .helpers import PROJECT
from .policy_helpers import JOB, both, stack_with

# The policy tests' module fixtures (tests/policy_helpers.py), bound here for pytest to find.
baseline, harness, configured_harness = policy_helpers.baseline, policy_helpers.harness, policy_helpers.configured_harness


# --- GPU Jobs outside Kueue ----------------------------------------------------------------------------

CRON_JOB = "kubernetes:batch/v1:CronJob"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def _metadatas(record: RecordedResource) -> list[dict[str, Any]]:
    """The object's metadata in inputs and outputs (possibly one object: the mock echoes inputs)."""
    return list({id(m): m for m in (record.inputs["metadata"], record.outputs["metadata"])}.values())


def _queued_as(queue: str | None):
    """The batch job's Job labelled with `queue` (None: the label removed)."""

    def change(records):
        record = next(r for r in records if r.type == JOB and r.name == "ticket-labels-job")
        for metadata in _metadatas(record):
            metadata["labels"].pop(QUEUE_LABEL)
            if queue is not None:
                metadata["labels"][QUEUE_LABEL] = queue
        return records

    return change


def _kueue_hits(running, records) -> set[str]:
    hits = [d for d in running.analyze_stack(records) if d.policy == "gpu-jobs-through-kueue"]
    assert all(d.level == "mandatory" for d in hits)
    return {d.urn.rsplit("::", 1)[-1] for d in hits}


@pytest.mark.parametrize(
    "queue, defaults, configured_verdict",
    [
        (None, {"ticket-labels-job"}, {"ticket-labels-job"}),
        ("batch-nope", {"ticket-labels-job"}, {"ticket-labels-job"}),
        ("shared", {"ticket-labels-job"}, set()),
        ("batch", set(), set()),
    ],
    ids=["no-label", "unknown-queue", "external-queue", "tenants-own-queue"],
)
def test_a_gpu_job_must_be_queued_in_a_local_queue_of_its_namespace(
    harness, configured_harness, baseline, queue, defaults, configured_verdict
):
    """Without the label Kueue leaves the Job alone and it runs outside the batch quota; a label
    naming no LocalQueue of the namespace keeps it suspended. The tenant's own `batch` queue is
    fine, and a queue declared outside the stack once the policy config names it."""
    records = stack_with(baseline, _queued_as(queue))
    assert _kueue_hits(harness, records) == defaults
    assert _kueue_hits(configured_harness, records) == configured_verdict


def test_the_message_says_why_and_names_the_namespaces_queues(harness, baseline):
    [hit] = [d for d in harness.analyze_stack(stack_with(baseline, _queued_as(None))) if d.policy == "gpu-jobs-through-kueue"]
    assert "outside the tenant's batch quota" in hit.message
    assert "batch, batch-review-labels, batch-ticket-labels" in hit.message


def _cron_job(labelled: bool):
    """A CronJob beside the batch jobs, its pods the ticket-labels Job's (GPUs and all)."""

    def change(records):
        job = next(r for r in records if r.type == JOB and r.name == "ticket-labels-job")
        labels = {} if not labelled else {QUEUE_LABEL: "batch"}
        inputs = {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": "nightly", "namespace": "team-b"},
            "spec": {
                "schedule": "0 2 * * *",
                "jobTemplate": {"metadata": {"labels": labels}, "spec": copy.deepcopy(job.outputs["spec"])},
            },
        }
        urn = f"urn:pulumi:prod::{PROJECT}::{CRON_JOB}::nightly"
        return [*records, RecordedResource(CRON_JOB, "nightly", urn, None, True, None, inputs, copy.deepcopy(inputs))]

    return change


def test_a_cron_jobs_gpu_jobs_must_be_queued_too(harness, baseline):
    assert _kueue_hits(harness, stack_with(baseline, _cron_job(labelled=False))) == {"nightly"}
    assert _kueue_hits(harness, stack_with(baseline, _cron_job(labelled=True))) == set()


def test_a_job_without_gpus_need_not_be_queued(harness, baseline):
    def cpu_only(records):
        records = _queued_as(None)(records)
        record = next(r for r in records if r.type == JOB and r.name == "ticket-labels-job")
        for spec in both(record):
            for container in [*spec.get("initContainers", []), *spec["containers"]]:
                for kind in ("requests", "limits"):
                    container.get("resources", {}).get(kind, {}).pop("nvidia.com/gpu", None)
        return records

    assert _kueue_hits(harness, stack_with(baseline, cpu_only)) == set()
