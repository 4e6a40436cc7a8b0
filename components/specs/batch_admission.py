"""The cluster's own check that GPU batch work goes through Kueue (pure functions): a
ValidatingAdmissionPolicy and its binding (admissionregistration.k8s.io/v1, GA since Kubernetes
1.30) that deny, in the tenants' namespaces, a batch/v1 Job (or a CronJob's job template) whose
pods ask for GPUs without the label `kueue.x-k8s.io/queue-name`.

Why: the CrossGuard policy `gpu-jobs-through-kueue` sees only the Jobs this program declares. A
tenant member's own `kubectl apply` of an unlabelled GPU Job is left alone by Kueue
(manageJobsWithoutQueueName is off: pkg/controller/jobframework/reconciler.go at v0.19.2, "queue-name
label is not set, ignoring the job"), so it would run at once, outside the tenant's batch quota and
the cohort's preemption (still bounded by the namespace's ResourceQuota).

What the label must name: CEL cannot list LocalQueues, so the policy asks for a non-empty label and
Kueue does the rest: a Job with a queue name is created suspended by Kueue's job webhook
(jobframework.WorkloadShouldBeSuspended, pkg/controller/jobframework/utils.go at v0.19.2) and its
Workload is not admitted while the LocalQueue does not exist ("LocalQueue %s doesn't exist",
getQueueBlocker in pkg/controller/core/workload_controller.go at v0.19.2), so a wrong name never
runs outside quota; it waits. An empty label is the same as none to Kueue (QueueNameForObject
returns "", pkg/controller/jobframework/utils.go), so it is refused too.

Kueue's default LocalQueue: at v0.19.2 Kueue's job webhook labels an unlabelled Job
`queue-name: default` when its namespace has a LocalQueue named `default`
(ApplyDefaultLocalQueueWithManagedJobsNamespaceSelector, pkg/controller/jobframework/defaults.go,
called from JobWebhook.Default in pkg/controller/jobs/job/job_webhook.go; no feature gate). The
platform makes no LocalQueue named `default` (its are `batch` and `batch-<job>`), so that
defaulting never applies to a tenant namespace it declares. Were one added, nothing here would
change: mutating webhooks run before validating admission policies, so the defaulted Job reaches
this policy labelled with a LocalQueue that exists.
"""

from __future__ import annotations

from typing import Any

from ..constants import GPU_RESOURCE, LABEL_TENANT, MIG_RESOURCE_PREFIX, standard_labels
from .kueue import QUEUE_NAME_LABEL, TENANT_LOCAL_QUEUE

ADMISSION_API_VERSION = "admissionregistration.k8s.io/v1"
GPU_JOBS_POLICY = "gpu-jobs-through-kueue"

# CEL over the admitted object (Kubernetes CEL, standard macros and functions only: no optional
# types, so it evaluates the same in any CEL implementation). A CronJob is checked on its job
# template, the Jobs it makes carry that template's labels (and are checked again when created).
_POD_SPEC = "object.kind == 'CronJob' ? object.spec.jobTemplate.spec.template.spec : object.spec.template.spec"


def _job_labels(obj: str) -> str:
    """The labels Kueue reads on the Job: its own, or a CronJob's job template's."""
    template = f"{obj}.spec.jobTemplate"
    return (
        f"{obj}.kind == 'CronJob' ? "
        f"(has({template}.metadata) && has({template}.metadata.labels) ? {template}.metadata.labels : {{}}) : "
        f"(has({obj}.metadata.labels) ? {obj}.metadata.labels : {{}})"
    )


def _queue_name(labels: str) -> str:
    return f"'{QUEUE_NAME_LABEL}' in {labels} ? {labels}['{QUEUE_NAME_LABEL}'] : ''"


def _gpu_names(resources: str) -> str:
    return f"{resources}.exists(r, r == '{GPU_RESOURCE}' || r.startsWith('{MIG_RESOURCE_PREFIX}'))"


def _suspended(obj: str) -> str:
    return f"has({obj}.spec.suspend) && {obj}.spec.suspend"


# name -> expression, in order (a variable may read those before it as `variables.<name>`).
GPU_JOB_VARIABLES: dict[str, str] = {
    "podSpec": _POD_SPEC,
    "containers": (
        "(has(variables.podSpec.initContainers) ? variables.podSpec.initContainers : []) + "
        "(has(variables.podSpec.containers) ? variables.podSpec.containers : [])"
    ),
    # Requests or limits of nvidia.com/gpu or any MIG profile, in any container or init container.
    "asksForGpus": (
        "variables.containers.exists(c, has(c.resources) && ("
        f"(has(c.resources.requests) && {_gpu_names('c.resources.requests')}) || "
        f"(has(c.resources.limits) && {_gpu_names('c.resources.limits')})))"
    ),
    "jobLabels": _job_labels("object"),
    "queueName": _queue_name("variables.jobLabels"),
    # Read on UPDATE only (oldObject is null on CREATE).
    "oldJobLabels": _job_labels("oldObject"),
    "oldQueueName": _queue_name("variables.oldJobLabels"),
    "resumes": f"({_suspended('oldObject')}) && !({_suspended('object')})",
}

# Allowed: no GPUs, or a queue named. On UPDATE, a Job that had no queue before (one created
# before this policy) keeps being updatable (the garbage collector removing its finalizers, a
# scale-down) unless the update resumes it; taking the label off a labelled Job is refused (Kueue
# itself allows that while the Job is suspended: validateUpdateForQueueName,
# pkg/controller/jobframework/validation.go at v0.19.2, after which resuming it would run it
# outside the queue).
GPU_JOB_RULE = (
    "!variables.asksForGpus || variables.queueName != '' || "
    "(request.operation == 'UPDATE' && variables.oldQueueName == '' && !variables.resumes)"
)

GPU_JOB_MESSAGE = (
    f"a Job (or CronJob job template) in a tenant namespace that asks for {GPU_RESOURCE} or {MIG_RESOURCE_PREFIX}* "
    f"must carry the label {QUEUE_NAME_LABEL} naming a LocalQueue of its namespace (the tenant's own is "
    f"'{TENANT_LOCAL_QUEUE}'), so that Kueue runs it within the tenant's batch quota"
)


def gpu_jobs_policy() -> dict[str, Any]:
    """The rule, for batch/v1 Jobs and CronJobs being created or updated; where it applies is the
    binding's. failurePolicy Fail: a Job the rule cannot be evaluated on is refused."""
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": GPU_JOBS_POLICY, "labels": standard_labels(GPU_JOBS_POLICY, "batch-admission")},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["batch"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["jobs", "cronjobs"],
                    }
                ]
            },
            "variables": [{"name": name, "expression": expression} for name, expression in GPU_JOB_VARIABLES.items()],
            "validations": [{"expression": GPU_JOB_RULE, "message": GPU_JOB_MESSAGE, "reason": "Forbidden"}],
        },
    }


def gpu_jobs_policy_binding() -> dict[str, Any]:
    """The rule enforced (Deny) in every namespace the platform labels with its tenant
    (components/specs/tenancy.py `namespace`), and nowhere else: system components' Jobs are
    not tenants' batch work."""
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": GPU_JOBS_POLICY, "labels": standard_labels(GPU_JOBS_POLICY, "batch-admission")},
        "spec": {
            "policyName": GPU_JOBS_POLICY,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchExpressions": [{"key": LABEL_TENANT, "operator": "Exists"}]}},
        },
    }
