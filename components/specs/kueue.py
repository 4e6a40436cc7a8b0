"""Kueue's objects for the batch jobs (pure functions): a ResourceFlavor per GPU pool, a
ClusterQueue per tenant with a batch budget (all in one cohort), a LocalQueue per such tenant
(for work its members submit) and per batch job, the
WorkloadPriorityClasses, and the chart's values.

API: kueue.x-k8s.io/v1beta2, what Kueue 0.19.2 stores (platform_config/pins.py). Field names are
those of apis/kueue/v1beta2/*_types.go at v0.19.2 and are validated against the CRD schemas in
the preview.

Quota: each tenant's ClusterQueue has, per pool of its `batchQuota`, that budget as nominal quota
(GPUs, CPU and memory; a budget without CPU or memory is bounded there by the pool's size only),
and may borrow up to what its namespace's experiment ResourceQuota leaves beyond its nominal
quota (batch pods run at inference-experiment priority, so that quota bounds them too). Kueue's
default quota check blocks a workload that asks for a resource its ClusterQueue does not cover
(BlockUndeclared, apis/config/v1beta2/configuration_types.go), so a batch pod asks for nothing but
GPUs, CPU and memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import yaml

from platform_config.capacity import BatchQueueRow
from platform_config.models import BatchJobConfig, NodePoolConfig
from platform_config.pins import KUEUE_API_VERSION
from platform_config.quantity import resource_quantity

from ..constants import EXPERIMENT_PRIORITY, LABEL_POOL, LABEL_TENANT, standard_labels
from .gpu_sharing import node_taint
from .pod_parts import node_spread

# Every tenant's ClusterQueue is in this cohort: unused nominal quota of one is lent to the others.
BATCH_COHORT = "batch"
# Batch work and experiments queue below each other and far below production serving (the
# PriorityClass inference-production is 1000, inference-experiment 100): a WorkloadPriorityClass
# orders and preempts Kueue workloads only; the pods keep their PriorityClass, which decides at
# the scheduler (and which the namespace quotas are scoped by).
BATCH_PRIORITY_CLASS = "batch"
EXPERIMENT_WORKLOAD_PRIORITY_CLASS = "experiment"
WORKLOAD_PRIORITIES = {BATCH_PRIORITY_CLASS: EXPERIMENT_PRIORITY - 50, EXPERIMENT_WORKLOAD_PRIORITY_CLASS: EXPERIMENT_PRIORITY}
# The labels Kueue reads on a Job (pkg/controller/constants/constants.go at v0.19.2:
# QueueLabel, WorkloadPriorityClassLabel).
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"


def _meta(name: str, component: str, namespace: str | None = None, **labels: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": standard_labels(name, component, **labels)}
    if namespace is not None:
        metadata["namespace"] = namespace
    return metadata


def resource_flavor(pool: NodePoolConfig) -> dict[str, Any]:
    """The pool as Kueue sees it: its nodes' pool label and GPU taint. A job's pods must tolerate
    the taint to be given the flavor (nodeTaints without tolerations: Kueue adds none)."""
    taint = node_taint()
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": _meta(pool.name, "batch-flavor", **{LABEL_POOL: pool.name}),
        "spec": {"nodeLabels": {LABEL_POOL: pool.name}, "nodeTaints": [taint]},
    }


def covered_resources(rows: Sequence[BatchQueueRow]) -> list[str]:
    """CPU, memory and every GPU resource the pools of these batch quotas provide (one resource group:
    each flavor lists them all, in this order)."""
    gpus = sorted({r for row in rows for r in row.supply.per_node})
    return ["cpu", "memory", *gpus]


def cluster_queue_name(tenant: str) -> str:
    return tenant


def cluster_queue(tenant: str, rows: Sequence[BatchQueueRow]) -> dict[str, Any]:
    """The tenant's batch quota per pool (its rows of the batch queues the plan holds), in the batch cohort; it
    reclaims its nominal quota from borrowers by preemption whatever their priority (reclaimWithinCohort: Any), and a
    job that borrows may preempt lower-priority borrowed work of others (borrowWithinCohort)."""
    own = [r for r in rows if r.tenant == tenant]
    resources = covered_resources(own)
    flavors = []
    for row in own:
        quotas = []
        for resource in resources:
            entry: dict[str, Any] = {
                "name": resource,
                "nominalQuota": resource_quantity(resource, row.nominal.get(resource, Decimal(0))),
            }
            limit = row.borrowing_limit.get(resource)
            if limit is not None:
                entry["borrowingLimit"] = resource_quantity(resource, limit)
            quotas.append(entry)
        flavors.append({"name": row.pool, "resources": quotas})
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ClusterQueue",
        "metadata": _meta(cluster_queue_name(tenant), "batch-queue", **{LABEL_TENANT: tenant}),
        "spec": {
            "cohortName": BATCH_COHORT,
            # Only the tenant's own namespace may queue here.
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": tenant}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{"coveredResources": resources, "flavors": flavors}],
            "preemption": {
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "LowerPriority"},
                "withinClusterQueue": "LowerPriority",
            },
        },
    }


def local_queue_name(job: BatchJobConfig) -> str:
    return f"batch-{job.name}"


def local_queue(job: BatchJobConfig) -> dict[str, Any]:
    """One LocalQueue per job: pausing the job stops its queue (stopPolicy HoldAndDrain), which
    Kueue honours for admitted workloads (evicts them; pkg/controller/core/workload_controller.go
    at v0.19.2), whereas a user-set `suspend` on an admitted Job is undone by Kueue
    (pkg/controller/jobframework/reconciler.go, "Job admitted, unsuspending")."""
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "LocalQueue",
        "metadata": _meta(local_queue_name(job), "batch-queue", job.tenant, **{LABEL_TENANT: job.tenant}),
        "spec": {"clusterQueue": cluster_queue_name(job.tenant), "stopPolicy": "HoldAndDrain" if job.paused else "None"},
    }


# The tenant's own LocalQueue, for work its members submit themselves (a Job or JobSet labelled
# `kueue.x-k8s.io/queue-name: batch` in the tenant's namespace); the platform's batch jobs each
# have their own (local_queue), so that pausing one stops nothing else.
TENANT_LOCAL_QUEUE = "batch"


def tenant_local_queue(tenant: str) -> dict[str, Any]:
    """The LocalQueue of a tenant with a batch budget, in its namespace, feeding its ClusterQueue."""
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "LocalQueue",
        "metadata": _meta(TENANT_LOCAL_QUEUE, "batch-queue", tenant, **{LABEL_TENANT: tenant}),
        "spec": {"clusterQueue": cluster_queue_name(tenant), "stopPolicy": "None"},
    }


def workload_priority_classes() -> list[dict[str, Any]]:
    descriptions = {
        BATCH_PRIORITY_CLASS: "Offline batch jobs: admitted after experiments, preempted first.",
        EXPERIMENT_WORKLOAD_PRIORITY_CLASS: "Experiments queued through Kueue: above batch, below production serving.",
    }
    return [
        {
            "apiVersion": KUEUE_API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": _meta(name, "scheduling"),
            "value": value,
            "description": descriptions[name],
        }
        for name, value in WORKLOAD_PRIORITIES.items()
    ]


# The chart's manager configuration at 0.19.2 (charts/kueue/values.yaml
# `managerConfig.controllerManagerConfigYaml`, its uncommented keys), which the values can only
# replace whole, with three changes (a test holds the rest to the chart's own text):
# - the metrics Kueue reports per ClusterQueue resource (usage, reservation, nominal quota,
#   borrowing limit: `kueue_cluster_queue_resource_usage`, ... in pkg/metrics/metrics.go) are
#   reported only with `metrics.enableClusterQueueResources` (apis/config/v1beta2/
#   configuration_types.go; cmd/kueue/main.go passes it to the caches), commented out in the chart;
# - the pod, deployment and statefulset integrations are left out: with them in the list, the chart
#   renders its pod, Deployment and StatefulSet webhooks Fail (charts/kueue/templates/webhook/
#   manifests.yaml lines 92-96, 315-319, 525-529, 758-762, 979-983, 1189-1193), so that while Kueue
#   cannot answer no pod or Deployment can be created in any namespace but kube-system and Kueue's
#   own, the mesh's, the model servers' and every chart's included, and a first `up` fails on every
#   one created before Kueue is ready. Without them they are Ignore and Kueue's no-op handler answers
#   them (pkg/controller/jobframework/setup.go line 109). LeaderWorkerSet's integration is left out
#   too: it turns the pod integration on by itself (pkg/controller/jobs/leaderworkerset/
#   leaderworkerset_controller.go line 62 ImplicitlyEnabledFrameworkNames, as Deployment's and
#   StatefulSet's do; integrationmanager.go collectImplicitlyEnabledIntegrations), whose real handler
#   then answers the Ignore pod webhooks, so a pod created before Kueue is up could miss a change
#   it needed. The platform queues batch/v1 Jobs only;
# - `managedJobsNamespaceSelector`: the tenants' namespaces (their LABEL_TENANT). The chart makes it
#   every job webhook's namespaceSelector (manifests.yaml lines 160-170), so the platform's own Jobs
#   (the weight mirror's, a chart's hook Jobs) are not held to Kueue being up. A Job there with a
#   queue name would not be suspended at creation (its namespace is not the tenants'), which only the
#   platform can create (tenant RBAC is namespaced).
KUEUE_UNUSED_POD_INTEGRATIONS = ("pod", "deployment", "statefulset", "leaderworkerset.x-k8s.io/leaderworkerset")
# The integrations that turn another on by themselves (ImplicitlyEnabledFrameworkNames at v0.19.2:
# pkg/controller/jobs/{deployment/deployment_controller.go:47, statefulset/statefulset_controller.go:50,
# leaderworkerset/leaderworkerset_controller.go:62}).
KUEUE_IMPLIED_INTEGRATIONS = {"deployment": "pod", "statefulset": "pod", "leaderworkerset.x-k8s.io/leaderworkerset": "pod"}
# charts/kueue/values.yaml `managerConfig.controllerManagerConfigYaml` `integrations.frameworks`
# (lines 165-184): what the chart's own config enables (a test holds it to the chart's text).
KUEUE_CHART_FRAMEWORKS = (
    "batch/job",
    "kubeflow.org/mpijob",
    "ray.io/rayjob",
    "ray.io/rayservice",
    "ray.io/raycluster",
    "jobset.x-k8s.io/jobset",
    "workload.codeflare.dev/appwrapper",
    "trainer.kubeflow.org/trainjob",
    "pod",
    "deployment",
    "statefulset",
    "leaderworkerset.x-k8s.io/leaderworkerset",
)
KUEUE_MANAGED_NAMESPACES = {"matchExpressions": [{"key": LABEL_TENANT, "operator": "Exists"}]}
KUEUE_MANAGER_CONFIG: dict[str, Any] = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "health": {"healthProbeBindAddress": ":8081"},
    "metrics": {"bindAddress": ":8443", "enableClusterQueueResources": True},
    "webhook": {"port": 9443},
    "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
    "controller": {
        "groupKindConcurrency": {
            "Job.batch": 5,
            "Pod": 5,
            "Workload.kueue.x-k8s.io": 10,
            "LocalQueue.kueue.x-k8s.io": 5,
            "ClusterQueue.kueue.x-k8s.io": 5,
            "ResourceFlavor.kueue.x-k8s.io": 1,
        }
    },
    "clientConnection": {"qps": 300, "burst": 500},
    "managedJobsNamespaceSelector": KUEUE_MANAGED_NAMESPACES,
    "integrations": {
        "frameworks": [framework for framework in KUEUE_CHART_FRAMEWORKS if framework not in KUEUE_UNUSED_POD_INTEGRATIONS]
    },
}


# The manager's pods (charts/kueue/templates/_helpers.tpl kueue.selectorLabels at v0.19.2, with the chart's name).
KUEUE_MANAGER_SELECTOR = {"app.kubernetes.io/name": "kueue", "control-plane": "controller-manager"}


def kueue_values(system_node_selector: dict[str, str] | None, prometheus: bool, spread: bool = False) -> dict[str, Any]:
    """The chart's values (keys checked against charts/kueue/values.yaml at v0.19.2 by the
    preview's upstream stage): two managers (leader election is on in the chart's manager config)
    with a disruption budget, on the system nodes on EKS; the manager config KUEUE_MANAGER_CONFIG
    (its webhooks kept to the tenants' Jobs); and, when the Prometheus Operator is installed, the
    chart's ServiceMonitor (`enablePrometheus`: templates/prometheus/monitor.yaml, https on the
    metrics Service with the Prometheus pod's service-account token; Prometheus selects it with the
    monitoring component's selectors, which take every namespace) and the ClusterQueue resource
    metrics the batch rules read. `spread` (production): one manager per node
    (`controllerManager.topologySpreadConstraints`, rendered as given by
    templates/manager/manager.yaml)."""
    manager: dict[str, Any] = {"replicas": 2, "podDisruptionBudget": {"enabled": True, "minAvailable": 1}}
    if spread:
        manager["topologySpreadConstraints"] = node_spread(KUEUE_MANAGER_SELECTOR, required=True)
    if system_node_selector:
        manager["nodeSelector"] = system_node_selector
    config = dict(KUEUE_MANAGER_CONFIG)
    if not prometheus:
        # Nothing would scrape them.
        config["metrics"] = {k: v for k, v in KUEUE_MANAGER_CONFIG["metrics"].items() if k != "enableClusterQueueResources"}
    return {
        "controllerManager": manager,
        "enablePrometheus": prometheus,
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(config, sort_keys=False)},
    }
