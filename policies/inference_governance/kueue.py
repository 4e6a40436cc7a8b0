"""Batch GPU jobs go through Kueue: a tenant's GPU Job names a LocalQueue of its namespace."""

from __future__ import annotations

from typing import Any

from .kube import (
    BATCH_JOB,
    CRON_JOB,
    LOCAL_QUEUE,
    QUEUE_NAME_LABEL,
    Report,
    config,
    get,
    name_of,
    namespace_of,
    pod_gpu_resources,
    pod_template,
)
from .workloads import of_type, tenant_namespaces

# The config schema of gpu-jobs-through-kueue's externalLocalQueues (pack.py declares it).
# LocalQueues as namespace/name: a namespace (a DNS-1123 label), then a name Kueue accepts in the
# kueue.x-k8s.io/queue-name label (a DNS-1123 subdomain: pkg/controller/jobframework/validation.go
# ValidateQueueName at v0.19.2). An entry without the `/` would name no queue: refused here, not dropped.
LOCAL_QUEUE_REF = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
LOCAL_QUEUE_REFS = {"type": "array", "items": {"type": "string", "pattern": LOCAL_QUEUE_REF}}


def gpu_jobs_through_kueue(args: Any, report_violation: Report) -> None:
    """A Job in a tenant namespace whose pods ask for GPUs (a batch/v1 Job, or the jobs a CronJob
    makes) is labelled with the LocalQueue it is queued in, one of its own namespace. Kueue reads
    only that label (pkg/controller/jobframework/utils.go QueueNameForObject at v0.19.2; an empty
    value is none). Its job webhook fills it in only where the namespace has a LocalQueue named
    `default` (jobframework/defaults.go), which the platform never declares; otherwise Kueue
    ignores a Job without it (manageJobsWithoutQueueName is off: jobframework/reconciler.go), so
    such a Job starts at once, outside the tenant's batch quota and the cohort's preemption. A
    label naming a LocalQueue its namespace does not have leaves the Job suspended until one of
    that name exists ("LocalQueue ... doesn't exist", core/workload_controller.go). This checks the
    Jobs the stack declares; the ValidatingAdmissionPolicy `gpu-jobs-through-kueue` the Kueue
    component installs refuses tenants' own unlabelled GPU Jobs in the cluster."""
    tenants = tenant_namespaces(args)
    queues = {(namespace_of(q.props), name_of(q.props)) for q in of_type(args, LOCAL_QUEUE)}
    external = (str(entry).partition("/") for entry in config(args).get("externalLocalQueues", []))
    queues |= {(ns, name) for ns, slash, name in external if slash}
    for resource in args.resources:
        if resource.resource_type not in (BATCH_JOB, CRON_JOB):
            continue
        namespace = namespace_of(resource.props)
        template = pod_template(resource.resource_type, resource.props)
        if namespace not in tenants or template is None or not pod_gpu_resources(get(template, "spec", default={})):
            continue
        # Kueue reads the Job's own labels: for a CronJob, its job template's.
        cron = resource.resource_type == CRON_JOB
        job_metadata = get(resource.props, "spec", "jobTemplate", "metadata") if cron else get(resource.props, "metadata")
        queue = get(job_metadata, "labels", QUEUE_NAME_LABEL)
        where = f"{'CronJob' if cron else 'Job'} {namespace}/{name_of(resource.props)}"
        own = sorted(name for ns, name in queues if ns == namespace)
        choices = f"one of {', '.join(own)}" if own else f"a LocalQueue of namespace {namespace} (it has none)"
        if not queue:
            report_violation(
                f"{where} asks for GPUs without the label {QUEUE_NAME_LABEL}: Kueue leaves it alone, so it runs at once "
                f"outside the tenant's batch quota; label it with {choices}",
                resource.urn,
            )
        elif (namespace, queue) not in queues:
            report_violation(
                f"{where} is labelled {QUEUE_NAME_LABEL}: {queue}, a LocalQueue namespace {namespace} does not have: Kueue "
                f"holds it suspended until that LocalQueue exists; name {choices}",
                resource.urn,
            )
