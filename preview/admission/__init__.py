"""The admission and scheduling stage: what the API server and the scheduler would do with
every pod template the program declares, following the upstream semantics.

For each workload (Deployment, StatefulSet, Job, Knative Service), in the order a real cluster
applies them:
1. the containers the cluster adds, sized as their injectors size them: Istio's sidecar where
   Istio's webhook selectors and injection rule put one (`istio_injects`: the namespace's label,
   then the pod's `sidecar.istio.io/inject` label or annotation) and Knative's queue-proxy (see
   ISTIO_PROXY_DEFAULT, QUEUE_PROXY_DEFAULT);
2. API defaulting: a container with a limit and no request gets the request equal to the limit
   (kubernetes pkg/apis/core/v1/defaults.go, SetDefaults_Pod);
3. LimitRanger (plugin/pkg/admission/limitranger/admission.go): `mergeContainerResources`
   fills a missing limit from `default` and a missing request from `defaultRequest`, then
   `min`, `max` and `maxLimitRequestRatio` are enforced per container;
4. validation (pkg/apis/core/validation, ValidateResourceRequirements): a request above its
   limit is refused ("must be less than or equal to cpu limit"); an extended resource (GPU, MIG
   slice) needs request == limit, in whole units;
5. Pod Security admission at the namespace's `enforce` level (k8s.io/pod-security-admission
   policy checks for baseline and restricted);
6. Knative's webhook (knative/serving pkg/apis/serving/k8s_validation.go): fields Knative
   refuses, and pod-spec fields it admits only behind a `kubernetes.podspec-*` feature flag;
7. ResourceQuota (pkg/quota/v1/evaluator/core/pods.go): a pod in scope of a quota that limits
   `requests.cpu`/`limits.memory`/... must set them, and every workload at its peak must fit
   each quota in scope. A model server's peak is the one its plan sizes and the program exports
   (`serverPeaks`: the heaviest version at its maximum, the others at their share of the traffic,
   each rolling out; `platform_config.serving.version_peaks`, as the config checks count it);
   another workload's is its maximum plus its rollout surge;
8. scheduling onto the pool its node selector names: the selector's labels are on the pool's
   nodes, every taint of the pool is tolerated, the PriorityClass exists, and all pods at peak
   bin-pack onto the pool's nodes at maxSize (allocatable CPU, memory, disk, whole GPUs and MIG
   slices per node after the pool's geometry, minus the system reserve: the program exports
   these as the `nodePools` stack output, the EKS system node group's included). A pod with no
   node selector goes where the scheduler would put it: onto the first pool whose taints it
   tolerates; when no pool it tolerates is known (an existing cluster's own nodes) and it asks for
   no GPU, it is left to the cluster's scheduler, unchecked (`left_to_cluster_scheduler`); a pod
   that asks for a GPU must name its pool.

One module per concern: the workloads and their namespaces (workloads.py, WORKLOAD_KINDS), the containers the
cluster adds (injection.py), defaulting, LimitRanger, validation and Pod Security (pod_admission.py), Knative's
webhook (knative.py), ResourceQuota (quota.py) and the pools (scheduling.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .injection import controller_containers, istio_injects, webhook_containers
from .knative import knative_features, knative_webhook
from .pod_admission import api_defaults, limit_range_defaults, limit_range_validation, pod_security, validate_resources
from .quota import quota_usage, set_peaks
from .scheduling import PoolTemplate, bin_pack, pool_for
from .workloads import WORKLOAD_KINDS, Workload, by_kind, declared_namespaces, namespace_and_name, read_workloads

__all__ = ["WORKLOAD_KINDS", "AdmissionResult", "PoolTemplate", "Workload", "admit_and_schedule", "istio_injects"]


@dataclass
class AdmissionResult:
    workloads: list[Workload]
    findings: list[str]

    @property
    def failed(self) -> bool:
        return bool(self.findings)

    @property
    def left_to_cluster_scheduler(self) -> list[Workload]:
        return [w for w in self.workloads if w.left_to_cluster_scheduler]

    @property
    def unchecked_placement_note(self) -> str:
        """For the stage's summary: how many pod templates the cluster's scheduler places on
        nodes the program does not describe ("" when none)."""
        unchecked = self.left_to_cluster_scheduler
        if not unchecked:
            return ""
        return (
            f"{len(unchecked)} without a nodeSelector or GPU placed by the cluster's scheduler on its own nodes, unchecked "
            f"({', '.join(w.label for w in unchecked)})"
        )


def admit_and_schedule(
    objects: list[dict[str, Any]], pool_outputs: list[dict[str, Any]], server_peaks: Sequence[dict[str, Any]] = ()
) -> AdmissionResult:
    namespaces = declared_namespaces(objects)
    features = knative_features(objects)
    priority_classes = {namespace_and_name(p)[1] for p in by_kind(objects, "PriorityClass")}
    pools = [PoolTemplate.from_output(p) for p in pool_outputs]
    found = read_workloads(objects)
    for workload in found:
        namespace = namespaces.get(workload.namespace)
        if namespace is None:
            workload.findings.append(f"namespace {workload.namespace} is not declared")
        # In the API server's order: the controller's pod, API defaulting, the built-in mutating
        # plugins (LimitRanger), the mutating webhooks (Istio), then validation, the
        # validating plugins and webhooks, and ResourceQuota last.
        controller_containers(workload)
        for container in workload.containers + workload.init_containers:
            api_defaults(container)
        limit_range_defaults(workload, namespace)
        webhook_containers(workload, namespace)
        validate_resources(workload)
        limit_range_validation(workload, namespace)
        pod_security(workload, namespace)
        knative_webhook(workload, features)
        klass = workload.pod.get("priorityClassName")
        if klass and klass not in priority_classes and klass not in ("system-cluster-critical", "system-node-critical"):
            workload.findings.append(f"PriorityClass {klass} does not exist")
    set_peaks(found, server_peaks)
    for workload in found:
        if workload.daemon:
            # A pod on each node of its pool at maxSize.
            daemon_pool = pool_for(workload, pools)
            workload.peak = daemon_pool.max_size if daemon_pool is not None else 0
    findings = quota_usage(found, namespaces)
    by_pool: dict[str, list[Workload]] = {}
    for workload in found:
        pool = pool_for(workload, pools)
        if pool is not None:
            workload.pool = pool.name
            by_pool.setdefault(pool.name, []).append(workload)
    for pool in pools:
        findings += bin_pack(pool, by_pool.get(pool.name, []))
    for workload in found:
        workload.findings = list(dict.fromkeys(workload.findings))  # one line per problem, whichever quota saw it
    findings = [f"{w.label}: {f}" for w in found for f in w.findings] + findings
    return AdmissionResult(found, findings)
