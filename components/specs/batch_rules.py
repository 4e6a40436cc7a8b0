"""The batch queues' PrometheusRule (pure functions): recording rules per tenant ClusterQueue and
alerts on the batch jobs, in Kueue's namespace (kube-prometheus-stack selects rules of every
namespace, components/monitoring.py).

What is read, all of it scraped already:

- Kueue 0.19.2's metrics (pkg/metrics/metrics.go at v0.19.2), scraped through the chart's
  ServiceMonitor (components/specs/kueue.py kueue_values). Gauges carry `replica_role`
  (`leader`, `follower`: pkg/util/roletracker/tracker.go), and the caches of both managers report
  them (ReportPendingWorkloads sets the role it runs as), so every query reads the leader's
  series only, or a gauge would count twice. A ClusterQueue's series name it in `cluster_queue`,
  which is its tenant's name (components/specs/kueue.py cluster_queue_name). A LocalQueue's
  series carry its own `namespace` label, which clashes with the scrape target's (the chart's
  ServiceMonitor does not honour labels): Prometheus keeps the target's (`kueue-system`) and
  renames the LocalQueue's to `exported_namespace`.
  The resource series (`kueue_cluster_queue_resource_usage`, `kueue_cluster_queue_nominal_quota`)
  need `metrics.enableClusterQueueResources`, which the platform turns on; the LocalQueue series
  are on by default at 0.19.2 (feature gate LocalQueueMetrics, beta and on since 0.17,
  pkg/features/kube_features.go; `metrics.localQueueMetrics.enable` defaults to true,
  apis/config/v1beta2/defaults.go).
- kube-state-metrics' Job metrics (kube-prometheus-stack's subchart), labelled with the Job's
  `namespace` and `job_name` (its ServiceMonitor honours labels: the stack's values.yaml
  `kube-state-metrics.prometheus.monitor.http.honorLabels: true`). kube-prometheus-stack 81.4.3
  depends on the kube-state-metrics chart 7.1.0 (prometheus-community/helm-charts tag
  kube-prometheus-stack-81.4.3, charts/kube-prometheus-stack/Chart.yaml `dependencies`), whose
  appVersion 2.18.0 is the image it runs (tag kube-state-metrics-7.1.0, Chart.yaml; values.yaml
  `image.tag` empty: v + appVersion), with `jobs` among its default `collectors` (values.yaml,
  passed as `--resources`, templates/deployment.yaml). At kubernetes/kube-state-metrics v2.18.0,
  internal/store/job.go declares `kube_job_status_start_time`, `kube_job_status_active`,
  `kube_job_status_succeeded`, `kube_job_spec_completions` and `kube_job_failed` (label
  `condition`: `true`, `false` or `unknown`, each 1 or 0, internal/store/utils.go
  addConditionMetrics), all STABLE, each with the default labels `namespace` and `job_name`
  (docs/metrics/workload/job-metrics.md agrees).

Recorded series follow the `level:metric:operations` naming of the SLO rules: `tenant:...` per
tenant ClusterQueue, `tenant_flavor_resource:...` per tenant, ResourceFlavor (a GPU pool) and GPU
resource (`nvidia.com/gpu` or one MIG profile, `nvidia.com/mig-...`), each labelled `tenant`. A
whole GPU and a MIG slice are different units and Kueue's quota (and borrowing) is per flavor and
resource, so GPU series are never added across resources: borrowing on one MIG profile is not
netted against spare quota on another.

Alerts (`severity: ticket`: batch work waits, nobody is paged), each with a runbook in the
docs/design/batch-jobs.md:
- BatchJobQueuedTooLong: a job's workload has waited in its LocalQueue (pending, admissible or
  not) for longer than the job's own `deadline`, the time it is allowed to run once started.
  A paused job waits on purpose: its LocalQueue is stopped, and the alert is silent while it is.
  Kueue reports a LocalQueue's Active condition as `kueue_local_queue_status{active="False"}`
  (pkg/metrics/metrics.go ReportLocalQueueStatus at v0.19.2) with no reason label, and
  pkg/controller/core/localqueue_controller.go (Reconcile, v0.19.2) sets it False for three
  reasons: Stopped (a stopPolicy other than None), ClusterQueueDoesNotExist and
  ClusterQueueIsInactive. So the alert is silent only while the LocalQueue is inactive *and* the
  tenant's ClusterQueue is active (`kueue_cluster_queue_status{status="active"}`, ClusterQueueByStatus:
  `pending`, `active` or `terminating`): then Stopped is the one reason left. A job waiting behind a
  missing, pending or terminating ClusterQueue still opens its ticket, and so does a paused job
  whose ClusterQueue is inactive (Reconcile checks the stopPolicy first, but the ClusterQueue is
  broken either way). Read from the metrics, not the config, so pausing a job stays a change to
  its LocalQueue's stopPolicy alone.
- BatchJobBehindDeadline: a running job has used more of its deadline than it has finished
  shards, once half the deadline is gone: at that pace the Job's activeDeadlineSeconds ends it
  before its last shard.
- BatchJobFailed: the Job failed (deadline exceeded, or a shard out of retries).
- BatchQueuePreemptedRepeatedly: a tenant's batch workloads were evicted by preemption at least
  REPEATED_PREEMPTIONS times in the last hour (borrowed quota reclaimed, or outranked).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from platform_config.capacity import BatchQueueRow, batch_tenants
from platform_config.gpu_catalog import GPU_RESOURCE, MIG_RESOURCE_PREFIX
from platform_config.models import BatchJobConfig, duration_seconds
from platform_config.namespaces import KUEUE_NAMESPACE

from ..constants import standard_labels
from .batch_job import job_name
from .kueue import cluster_queue_name, local_queue_name
from .metrics import promql_names, promql_string
from .slo_rules import TEAM_LABEL

# Series the rules read that no rule records: name → where it comes from.
# Kueue's: pkg/metrics/metrics.go at v0.19.2, by the variable that declares each.
BATCH_SOURCE_SERIES: dict[str, str] = {
    "kueue_pending_workloads": "Kueue PendingWorkloads (cluster_queue, status)",
    "kueue_admitted_active_workloads": "Kueue AdmittedActiveWorkloads (cluster_queue)",
    "kueue_cluster_queue_resource_usage": "Kueue ClusterQueueResourceUsage (cluster_queue, flavor, resource)",
    "kueue_cluster_queue_nominal_quota": "Kueue ClusterQueueResourceNominalQuota (cluster_queue, flavor, resource)",
    "kueue_evicted_workloads_total": "Kueue EvictedWorkloadsTotal (cluster_queue, reason)",
    "kueue_local_queue_pending_workloads": "Kueue LocalQueuePendingWorkloads (name, namespace, status)",
    "kueue_local_queue_status": "Kueue LocalQueueByStatus (name, namespace, active)",
    "kueue_cluster_queue_status": "Kueue ClusterQueueByStatus (cluster_queue, status)",
    "kube_job_status_start_time": "kube-state-metrics job metrics (job_name, namespace)",
    "kube_job_status_active": "kube-state-metrics job metrics (job_name, namespace)",
    "kube_job_status_succeeded": "kube-state-metrics job metrics (job_name, namespace)",
    "kube_job_spec_completions": "kube-state-metrics job metrics (job_name, namespace)",
    "kube_job_failed": "kube-state-metrics job metrics (job_name, namespace, condition)",
}

# The leader's series only (see above).
LEADER = 'replica_role="leader"'
# Every GPU resource a ClusterQueue covers: whole GPUs and MIG slices (Kueue labels a resource
# series with the resource's own name).
GPU_RESOURCES = f'resource=~"{GPU_RESOURCE}|{MIG_RESOURCE_PREFIX}.+"'
# Evictions by preemption in an hour that make a tenant's batch work "repeatedly preempted".
REPEATED_PREEMPTIONS = 3
RUNBOOKS = {
    "BatchJobQueuedTooLong": "docs/design/batch-jobs.md#batch-job-queued-too-long",
    "BatchJobBehindDeadline": "docs/design/batch-jobs.md#batch-job-behind-its-deadline",
    "BatchJobFailed": "docs/design/batch-jobs.md#batch-job-failed",
    "BatchQueuePreemptedRepeatedly": "docs/design/batch-jobs.md#batch-queue-preempted-repeatedly",
}
RULE_NAME = "batch-queues"


def _record(name: str, expr: str) -> dict[str, Any]:
    return {"record": name, "expr": expr}


def _as_tenant(expr: str) -> str:
    """Kueue's `cluster_queue` renamed to the `tenant` it is named after (one series per queue:
    the sum only drops the old label)."""
    return f'sum without (cluster_queue) (label_replace({expr}, "{TEAM_LABEL}", "$1", "cluster_queue", "(.*)"))'


def queue_rules(tenants: Sequence[str]) -> list[dict[str, Any]]:
    """Per tenant ClusterQueue: pending and admitted workloads, GPUs in use against the nominal
    quota per flavor and resource (what is beyond it is borrowed from the cohort), and evictions
    by reason."""
    queues = f"cluster_queue=~{promql_names(cluster_queue_name(t) for t in tenants)}, {LEADER}"
    usage, nominal = "tenant_flavor_resource:kueue_gpu_usage:sum", "tenant_flavor_resource:kueue_gpu_nominal_quota:sum"
    # Kueue's quota is per flavor and resource: so are the sums (a whole GPU is no MIG slice).
    by = "cluster_queue, flavor, resource"
    return [
        _record(
            "tenant:kueue_pending_workloads:sum",
            _as_tenant(f"sum by (cluster_queue, status) (kueue_pending_workloads{{{queues}}})"),
        ),
        _record(
            "tenant:kueue_admitted_active_workloads:sum",
            _as_tenant(f"sum by (cluster_queue) (kueue_admitted_active_workloads{{{queues}}})"),
        ),
        _record(
            usage,
            _as_tenant(f"sum by ({by}) (kueue_cluster_queue_resource_usage{{{queues}, {GPU_RESOURCES}}})"),
        ),
        _record(
            nominal,
            _as_tenant(f"sum by ({by}) (kueue_cluster_queue_nominal_quota{{{queues}, {GPU_RESOURCES}}})"),
        ),
        # Evaluated after the two above in the same group: it reads their fresh values. One series
        # per flavor and resource: what one resource borrows is not offset by another's spare quota.
        _record("tenant_flavor_resource:kueue_gpu_borrowed:sum", f"clamp_min({usage} - {nominal}, 0)"),
        _record(
            "tenant:kueue_evicted_workloads:increase1h",
            _as_tenant(f"sum by (cluster_queue, reason) (increase(kueue_evicted_workloads_total{{{queues}}}[1h]))"),
        ),
    ]


def _job_selector(job: BatchJobConfig) -> str:
    return f"namespace={promql_string(job.tenant)}, job_name={promql_string(job_name(job))}"


def job_rules(jobs: Sequence[BatchJobConfig]) -> list[dict[str, Any]]:
    """Each platform job's share of shards done (kube-state-metrics)."""
    if not jobs:
        return []
    sel = f"namespace=~{promql_names(sorted({j.tenant for j in jobs}))}, job_name=~{promql_names(job_name(j) for j in jobs)}"
    by = "namespace, job_name"
    return [
        _record(
            "job:kube_job_shards_done:ratio",
            f"max by ({by}) (kube_job_status_succeeded{{{sel}}}) / max by ({by}) (kube_job_spec_completions{{{sel}}})",
        )
    ]


def _alert(name: str, expr: str, for_: str, labels: dict[str, str], summary: str, description: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {**labels, "severity": "ticket"},
        "annotations": {"summary": summary, "description": description, "runbook_url": RUNBOOKS[name]},
    }


def job_alerts(job: BatchJobConfig) -> list[dict[str, Any]]:
    """A job's alerts: queued too long (not while its queue is stopped behind an active
    ClusterQueue), behind its deadline, failed."""
    labels = {TEAM_LABEL: job.tenant, "batch_job": job.name}
    sel = _job_selector(job)
    by = "namespace, job_name"
    deadline = duration_seconds(job.deadline)
    started = f"(time() - max by ({by}) (kube_job_status_start_time{{{sel}}}))"
    queue = f"exported_namespace={promql_string(job.tenant)}, name={promql_string(local_queue_name(job))}, {LEADER}"
    # Inactive with its ClusterQueue active: the LocalQueue's only reason left is Stopped (see above).
    cluster_queue = f"cluster_queue={promql_string(cluster_queue_name(job.tenant))}, {LEADER}"
    stopped = (
        f'kueue_local_queue_status{{{queue}, active="False"}} == 1'
        f' and on () kueue_cluster_queue_status{{{cluster_queue}, status="active"}} == 1'
    )
    return [
        _alert(
            "BatchJobQueuedTooLong",
            f"sum(kueue_local_queue_pending_workloads{{{queue}}}) > 0 unless on () ({stopped})",
            job.deadline,
            labels,
            f"Batch job {job.name} has waited in its queue for over {job.deadline}",
            f"The workload of batch job {job.tenant}/{job.name} has been pending in LocalQueue {local_queue_name(job)} "
            f"for longer than its deadline ({job.deadline}), the time it may run once admitted.",
        ),
        _alert(
            "BatchJobBehindDeadline",
            f"job:kube_job_shards_done:ratio{{{sel}}} < on ({by}) ({started} / {deadline:g})"
            f" and on ({by}) {started} > {deadline / 2:g}"
            f" and on ({by}) max by ({by}) (kube_job_status_active{{{sel}}}) > 0",
            "15m",
            labels,
            f"Batch job {job.name} is behind its deadline",
            f"Batch job {job.tenant}/{job.name} has run over half its deadline ({job.deadline}) and finished a smaller "
            "share of its shards than of its deadline: at this pace it is stopped before its last shard. "
            "Shards done: {{ $value | humanizePercentage }}.",
        ),
        _alert(
            "BatchJobFailed",
            f'max by ({by}) (kube_job_failed{{{sel}, condition="true"}}) > 0',
            "1m",
            labels,
            f"Batch job {job.name} failed",
            f"Batch job {job.tenant}/{job.name} failed: its deadline ({job.deadline}) ran out, or a shard used up its "
            f"{job.retries_per_shard} retries.",
        ),
    ]


def queue_alerts() -> list[dict[str, Any]]:
    return [
        _alert(
            "BatchQueuePreemptedRepeatedly",
            f'tenant:kueue_evicted_workloads:increase1h{{reason="Preempted"}} >= {REPEATED_PREEMPTIONS}',
            "5m",
            {},
            "Batch work of {{ $labels.tenant }} is preempted repeatedly",
            f"At least {REPEATED_PREEMPTIONS} of the tenant's batch workloads were evicted by preemption in the last hour "
            "({{ $value }}): its borrowed quota is reclaimed, or higher-priority work outranks it.",
        )
    ]


def batch_prometheus_rule(queues: Sequence[BatchQueueRow], jobs: Sequence[BatchJobConfig]) -> dict[str, Any]:
    """The batch queues' PrometheusRule, for the tenants with a batch quota (the plan's batch
    queues) and the platform's jobs."""
    groups: list[dict[str, Any]] = [
        {"name": "batch.queues", "interval": "30s", "rules": queue_rules(batch_tenants(queues)) + job_rules(jobs)},
        {"name": "batch.alerts", "rules": queue_alerts() + [a for job in jobs for a in job_alerts(job)]},
    ]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": RULE_NAME, "namespace": KUEUE_NAMESPACE, "labels": standard_labels(RULE_NAME, "slo")},
        "spec": {"groups": groups},
    }
