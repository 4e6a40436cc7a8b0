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
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Iterable, Sequence

from components.backends.knative import rollout_surge as knative_rollout_surge
from platform_config.quantity import parse_quantity

from .selectors import requirement_holds

EXTENDED_PREFIXES = ("nvidia.com/",)
# What Kubernetes computes quota and scheduling over for a container.
COMPUTE = ("cpu", "memory", "ephemeral-storage")

# Istio 1.30.3 global.proxy.resources (istio-discovery values.yaml): the sidecar's size unless
# the pod's sidecar.istio.io/proxy* annotations replace it (files/injection-template.yaml).
ISTIO_PROXY_DEFAULT = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "2000m", "memory": "1024Mi"}}
ISTIO_PROXY_ANNOTATIONS = {
    ("requests", "cpu"): "sidecar.istio.io/proxyCPU",
    ("requests", "memory"): "sidecar.istio.io/proxyMemory",
    ("limits", "cpu"): "sidecar.istio.io/proxyCPULimit",
    ("limits", "memory"): "sidecar.istio.io/proxyMemoryLimit",
}
ISTIO_PROXY_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "privileged": False,
    "readOnlyRootFilesystem": True,
    "runAsGroup": 1337,
    "runAsNonRoot": True,
    "runAsUser": 1337,
}
# knative/serving knative-v1.23.0 pkg/reconciler/revision/resources/queue.go: 25m of CPU
# requested by default (queue-proxy-resource-defaults off), the queue.sidecar.* annotations
# set the rest; its security context is fixed there too.
QUEUE_PROXY_DEFAULT = {"requests": {"cpu": "25m"}}
QUEUE_PROXY_ANNOTATIONS = {
    ("requests", "cpu"): "queue.sidecar.serving.knative.dev/cpu-resource-request",
    ("requests", "memory"): "queue.sidecar.serving.knative.dev/memory-resource-request",
    ("limits", "cpu"): "queue.sidecar.serving.knative.dev/cpu-resource-limit",
    ("limits", "memory"): "queue.sidecar.serving.knative.dev/memory-resource-limit",
}
# Whether Istio 1.30.3 injects its sidecar, for the default revision (the one the platform
# installs: istiod_values sets no `revision`). First the MutatingWebhookConfiguration's selectors
# decide whether istiod is asked at all (manifests/charts/istio-control/istio-discovery/templates/
# mutatingwebhook.yaml): a namespace labelled istio-injection=enabled (or, without that label,
# istio.io/rev=default) asks for every pod but one labelled sidecar.istio.io/inject=false; a
# namespace with neither label only for a pod labelled sidecar.istio.io/inject=true (or
# istio.io/rev=default); istio-injection=disabled for none. Then istiod's injectRequired
# (pkg/kube/inject/inject.go) skips hostNetwork pods and the IgnoredNamespaces
# (pkg/kube/inject/initializer.go), and reads sidecar.istio.io/inject from the pod's label when
# the label is present, else from the legacy annotation: "true" injects, "false" does not,
# anything else falls to the injection policy (global.proxy.autoInject, "enabled" by default;
# the never/always-inject selectors are empty), so injects.
ISTIO_INJECT_KEY = "sidecar.istio.io/inject"
ISTIO_REVISION_KEY = "istio.io/rev"
ISTIO_NAMESPACE_INJECTION_KEY = "istio-injection"
ISTIO_DEFAULT_REVISION = "default"
ISTIO_IGNORED_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease", "local-path-storage"})


def istio_injects(
    namespace: str, namespace_labels: dict[str, str], labels: dict[str, str], annotations: dict[str, str], host_network: bool
) -> bool:
    """Whether Istio adds its sidecar to a pod with these labels and annotations in this namespace."""
    opted_out = labels.get(ISTIO_INJECT_KEY) == "false"
    if ISTIO_NAMESPACE_INJECTION_KEY in namespace_labels:
        asked = namespace_labels[ISTIO_NAMESPACE_INJECTION_KEY] == "enabled" and not opted_out
    elif ISTIO_REVISION_KEY in namespace_labels:
        asked = namespace_labels[ISTIO_REVISION_KEY] == ISTIO_DEFAULT_REVISION and not opted_out
    else:
        asked = (labels.get(ISTIO_INJECT_KEY) == "true" and ISTIO_REVISION_KEY not in labels) or (
            labels.get(ISTIO_REVISION_KEY) == ISTIO_DEFAULT_REVISION and not opted_out
        )
    if not asked or host_network or namespace in ISTIO_IGNORED_NAMESPACES:
        return False
    stated = labels[ISTIO_INJECT_KEY] if ISTIO_INJECT_KEY in labels else annotations.get(ISTIO_INJECT_KEY, "")
    return stated != "false"


QUEUE_PROXY_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _injected(
    name: str,
    annotations: dict[str, str],
    keys: dict[tuple[str, str], str],
    default: dict[str, Any],
    security: dict[str, Any],
    *,
    replace: bool,
) -> dict[str, Any]:
    """An injected container sized from the pod's annotations. Istio replaces its default
    resources wholesale when any annotation is set (`replace`); Knative sets each one on top."""
    stated = {where: annotations[key] for where, key in keys.items() if key in annotations}
    resources: dict[str, dict[str, str]] = {} if (replace and stated) else json.loads(json.dumps(default))
    for (kind, resource), value in stated.items():
        resources.setdefault(kind, {})[resource] = value
    return {"name": name, "resources": resources, "securityContext": dict(security)}


# Pod Security Standards (k8s.io/pod-security-admission/policy, "latest").
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}

# knative/serving pkg/apis/serving/k8s_validation.go: container fields the webhook refuses, and
# pod-spec fields admitted only when config-features enables the named flag.
KNATIVE_FORBIDDEN_CONTAINER_FIELDS = ("lifecycle", "stdin", "stdinOnce", "tty", "volumeDevices")
KNATIVE_FEATURE_FIELDS = {
    "nodeSelector": "kubernetes.podspec-nodeselector",
    "tolerations": "kubernetes.podspec-tolerations",
    "affinity": "kubernetes.podspec-affinity",
    "priorityClassName": "kubernetes.podspec-priorityclassname",
    "initContainers": "kubernetes.podspec-init-containers",
    "topologySpreadConstraints": "kubernetes.podspec-topologyspreadconstraints",
    "runtimeClassName": "kubernetes.podspec-runtimeclassname",
    "schedulerName": "kubernetes.podspec-schedulername",
    "hostAliases": "kubernetes.podspec-hostaliases",
    "dnsPolicy": "kubernetes.podspec-dnspolicy",
    "dnsConfig": "kubernetes.podspec-dnsconfig",
    "shareProcessNamespace": "kubernetes.podspec-shareprocessnamespace",
    "hostIPC": "kubernetes.podspec-hostipc",
    "hostPID": "kubernetes.podspec-hostpid",
    "hostNetwork": "kubernetes.podspec-hostnetwork",
}
KNATIVE_TERMINATION_GRACE = "terminationGracePeriodSeconds"
# Feature flags that are on unless config-features says otherwise (pkg/apis/config/features.go,
# defaultFeaturesConfig); every other flag is off by default.
KNATIVE_FEATURES_ON_BY_DEFAULT = {"multi-container", "kubernetes.podspec-volumes-emptydir"}
# Volume types and the flag each needs (secret, configMap and projected need none; any other
# type is refused whatever the flags: fieldmask.go VolumeSourceMask).
KNATIVE_VOLUME_FLAGS = {
    "secret": None,
    "configMap": None,
    "projected": None,
    "emptyDir": "kubernetes.podspec-volumes-emptydir",
    "persistentVolumeClaim": "kubernetes.podspec-persistent-volume-claim",
    "hostPath": "kubernetes.podspec-volumes-hostpath",
    "csi": "kubernetes.podspec-volumes-csi",
    "ephemeral": "kubernetes.podspec-volumes-ephemeral",
    "image": "kubernetes.podspec-volumes-image",
}


@dataclass(frozen=True)
class PoolTemplate:
    name: str
    labels: dict[str, str]
    taints: list[dict[str, str]]
    allocatable: dict[str, Decimal]
    max_size: int

    @staticmethod
    def from_output(data: dict[str, Any]) -> PoolTemplate:
        return PoolTemplate(
            name=data["name"],
            labels=dict(data["labels"]),
            taints=list(data["taints"]),
            allocatable={k: parse_quantity(str(v)) for k, v in data["allocatable"].items()},
            max_size=int(data["maxSize"]),
        )


@dataclass
class Workload:
    kind: str
    namespace: str
    name: str
    pod: dict[str, Any]
    labels: dict[str, str]
    annotations: dict[str, str]
    min_replicas: int
    max_replicas: int
    surge: int
    knative: bool = False
    # A DaemonSet: one pod on every node of its pool, whatever the others need.
    daemon: bool = False
    findings: list[str] = field(default_factory=list)
    # Containers after injection, defaulting and LimitRanger.
    containers: list[dict[str, Any]] = field(default_factory=list)
    init_containers: list[dict[str, Any]] = field(default_factory=list)
    pool: str | None = None
    # No node selector, no GPU, and no pool it tolerates is known: the cluster's scheduler places
    # it on nodes the program does not describe, so its placement is not checked.
    left_to_cluster_scheduler: bool = False
    peak: int = 0
    placed: int = 0

    @property
    def label(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    def pod_requests(self) -> dict[str, Decimal]:
        """The pod's effective requests: the larger of any init container and the sum of the
        app containers, per resource (as the scheduler and quota count them)."""
        return self._pod_total("requests")

    def pod_limits(self) -> dict[str, Decimal]:
        return self._pod_total("limits")

    def _pod_total(self, kind: str) -> dict[str, Decimal]:
        total: dict[str, Decimal] = {}
        for container in self.containers:
            for resource, amount in _quantities(container, kind).items():
                total[resource] = total.get(resource, Decimal(0)) + amount
        for container in self.init_containers:
            for resource, amount in _quantities(container, kind).items():
                total[resource] = max(total.get(resource, Decimal(0)), amount)
        return total


def _quantities(container: dict[str, Any], kind: str) -> dict[str, Decimal]:
    return {k: parse_quantity(str(v)) for k, v in ((container.get("resources") or {}).get(kind) or {}).items()}


def _show(resource: str, amount: Decimal) -> str:
    if resource in ("memory", "ephemeral-storage"):
        return f"{(amount / 2**30).quantize(Decimal('0.01')).normalize():f}Gi"
    if resource == "cpu" and amount != amount.to_integral_value():
        return f"{int(amount * 1000)}m"
    return f"{amount.normalize():f}"


# --- collecting workloads -------------------------------------------------------------------


def _by_kind(objects: Iterable[dict[str, Any]], kind: str, api_prefix: str = "") -> list[dict[str, Any]]:
    return [o for o in objects if o.get("kind") == kind and str(o.get("apiVersion", "")).startswith(api_prefix)]


def _ns_name(obj: dict[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or "default"), str(metadata.get("name"))


def _max_surge(deployment: dict[str, Any], replicas: int) -> int:
    """maxSurge as the Deployment controller resolves it (default 25 %, rounded up)."""
    strategy = (deployment.get("spec") or {}).get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0
    surge = (strategy.get("rollingUpdate") or {}).get("maxSurge", "25%")
    if isinstance(surge, str) and surge.endswith("%"):
        return math.ceil(replicas * int(surge[:-1]) / 100)
    return int(surge)


def _labels_annotations(template: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    metadata = template.get("metadata") or {}
    return dict(metadata.get("labels") or {}), dict(metadata.get("annotations") or {})


def workloads(objects: list[dict[str, Any]]) -> list[Workload]:
    hpas = {
        (_ns_name(h)[0], h["spec"]["scaleTargetRef"]["name"]): h["spec"]
        for h in _by_kind(objects, "HorizontalPodAutoscaler")
        if (h.get("spec") or {}).get("scaleTargetRef", {}).get("kind") == "Deployment"
    }
    found: list[Workload] = []
    for kind in ("Deployment", "StatefulSet"):
        for obj in _by_kind(objects, kind, "apps/"):
            namespace, name = _ns_name(obj)
            spec = obj.get("spec") or {}
            replicas = int(spec.get("replicas", 1))
            hpa = hpas.get((namespace, name)) if kind == "Deployment" else None
            low = int(hpa.get("minReplicas", 1)) if hpa else replicas
            high = int(hpa["maxReplicas"]) if hpa else replicas
            surge = _max_surge(obj, high) if kind == "Deployment" else 0
            template = spec.get("template") or {}
            found.append(
                Workload(kind, namespace, name, template.get("spec") or {}, *_labels_annotations(template), low, high, surge)
            )
    for obj in _by_kind(objects, "DaemonSet", "apps/"):
        namespace, name = _ns_name(obj)
        template = (obj.get("spec") or {}).get("template") or {}
        found.append(
            Workload(
                "DaemonSet", namespace, name, template.get("spec") or {}, *_labels_annotations(template), 0, 0, 0, daemon=True
            )
        )
    for obj in _by_kind(objects, "Job", "batch/"):
        namespace, name = _ns_name(obj)
        spec = obj.get("spec") or {}
        parallel = int(spec.get("parallelism", 1))
        template = spec.get("template") or {}
        found.append(
            Workload("Job", namespace, name, template.get("spec") or {}, *_labels_annotations(template), parallel, parallel, 0)
        )
    for obj in _by_kind(objects, "Service", "serving.knative.dev/"):
        namespace, name = _ns_name(obj)
        template = (obj.get("spec") or {}).get("template") or {}
        annotations = (template.get("metadata") or {}).get("annotations") or {}
        low = int(annotations.get("autoscaling.knative.dev/min-scale", 0))
        high = int(annotations.get("autoscaling.knative.dev/max-scale", 0))
        initial = annotations.get("autoscaling.knative.dev/initial-scale")
        surge = knative_rollout_surge(low, None if initial is None else int(initial))
        workload = Workload(
            "KnativeService",
            namespace,
            name,
            template.get("spec") or {},
            *_labels_annotations(template),
            low,
            high,
            surge,
            knative=True,
        )
        if high == 0:
            workload.findings.append("no autoscaling.knative.dev/max-scale: Knative may scale it without bound")
        found.append(workload)
    return found


# --- admission ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Namespace:
    labels: dict[str, str]
    limit_ranges: list[dict[str, Any]]
    quotas: list[dict[str, Any]]


def _namespaces(objects: list[dict[str, Any]]) -> dict[str, Namespace]:
    limit_ranges: dict[str, list[dict[str, Any]]] = {}
    quotas: dict[str, list[dict[str, Any]]] = {}
    for kind, into in (("LimitRange", limit_ranges), ("ResourceQuota", quotas)):
        for obj in _by_kind(objects, kind):
            into.setdefault(_ns_name(obj)[0], []).append(obj)
    out: dict[str, Namespace] = {}
    for ns in _by_kind(objects, "Namespace"):
        name = str(ns["metadata"]["name"])
        labels = dict(ns["metadata"].get("labels") or {})
        out[name] = Namespace(labels, limit_ranges.get(name, []), quotas.get(name, []))
    return out


def _controller_containers(workload: Workload) -> None:
    """The pod as its controller makes it: the template's containers, and Knative's
    queue-proxy, which Knative writes into the revision's Deployment (so LimitRanger sees it)."""
    pod = workload.pod
    containers = [json.loads(json.dumps(c)) for c in pod.get("containers") or []]
    init = [json.loads(json.dumps(c)) for c in pod.get("initContainers") or []]
    if workload.knative:
        queue_proxy = _injected(
            "queue-proxy", workload.annotations, QUEUE_PROXY_ANNOTATIONS, QUEUE_PROXY_DEFAULT, QUEUE_PROXY_SECURITY, replace=False
        )
        containers.append(queue_proxy)
    workload.containers, workload.init_containers = containers, init


def _webhook_containers(workload: Workload, namespace: Namespace | None) -> None:
    """Istio's injection webhook adds the sidecar after the built-in mutating plugins
    (LimitRanger's defaults do not reach it; its own resources must satisfy the quotas), to the
    pods `istio_injects` says it injects. On Kubernetes 1.29+ Istio 1.30 injects it as a native
    sidecar (an init container with restartPolicy Always), which the scheduler and quotas count
    like an app container."""
    if namespace is not None and istio_injects(
        workload.namespace, namespace.labels, workload.labels, workload.annotations, bool(workload.pod.get("hostNetwork"))
    ):
        sidecar = _injected(
            "istio-proxy", workload.annotations, ISTIO_PROXY_ANNOTATIONS, ISTIO_PROXY_DEFAULT, ISTIO_PROXY_SECURITY, replace=True
        )
        # A container of its name in the pod is merged into it, its fields over the injector's
        # (pkg/kube/inject/webhook.go FindContainerFromPod, applyContainer/applyInitContainer).
        stub = next((c for c in workload.containers + workload.init_containers if c.get("name") == "istio-proxy"), None)
        if stub is not None:
            # Merged as a strategic merge patch merges resources: each of the stub's amounts over the injector's.
            for kind, amounts in (stub.get("resources") or {}).items():
                sidecar["resources"].setdefault(kind, {}).update(amounts)
            workload.containers = [c for c in workload.containers if c is not stub]
            workload.init_containers = [c for c in workload.init_containers if c is not stub]
        _api_defaults(sidecar)
        workload.containers.append(sidecar)


def _api_defaults(container: dict[str, Any]) -> None:
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    requests = resources.setdefault("requests", {})
    for resource, amount in limits.items():
        requests.setdefault(resource, amount)


def _limit_range_items(namespace: Namespace | None) -> list[dict[str, Any]]:
    items = []
    for limit_range in namespace.limit_ranges if namespace else []:
        items += [i for i in (limit_range.get("spec") or {}).get("limits") or [] if i.get("type") == "Container"]
    return items


def _limit_range_defaults(workload: Workload, namespace: Namespace | None) -> None:
    """LimitRanger's mutating half: a missing limit from `default`, a missing request from
    `defaultRequest`, for the containers the pod has when it reaches admission."""
    for item in _limit_range_items(namespace):
        for container in workload.containers + workload.init_containers:
            resources = container.setdefault("resources", {})
            limits = resources.setdefault("limits", {})
            requests = resources.setdefault("requests", {})
            for resource, amount in (item.get("default") or {}).items():
                limits.setdefault(resource, amount)
            for resource, amount in (item.get("defaultRequest") or {}).items():
                requests.setdefault(resource, amount)


def _limit_range_validation(workload: Workload, namespace: Namespace | None) -> None:
    """LimitRanger's validating half, over every container of the final pod."""
    for item in _limit_range_items(namespace):
        for container in workload.containers + workload.init_containers:
            _limit_range_bounds(workload, container, item)


def _limit_range_bounds(workload: Workload, container: dict[str, Any], item: dict[str, Any]) -> None:
    requests, limits = _quantities(container, "requests"), _quantities(container, "limits")
    where = f"container {container.get('name')}"
    for resource, text in (item.get("min") or {}).items():
        low = parse_quantity(str(text))
        if resource not in requests or requests[resource] < low:
            workload.findings.append(f"{where}: LimitRange minimum {resource} {text} not met")
    for resource, text in (item.get("max") or {}).items():
        high = parse_quantity(str(text))
        if resource not in limits or limits[resource] > high:
            workload.findings.append(f"{where}: LimitRange maximum {resource} {text} exceeded (or no limit)")
    for resource, text in (item.get("maxLimitRequestRatio") or {}).items():
        if resource in limits and not requests.get(resource):
            workload.findings.append(
                f"{where}: LimitRange maxLimitRequestRatio on {resource} needs a non-zero {resource} request"
            )
        elif resource in limits and limits[resource] / requests[resource] > parse_quantity(str(text)):
            workload.findings.append(f"{where}: {resource} limit/request ratio above the LimitRange's {text}")


def _validate_resources(workload: Workload) -> None:
    for container in workload.containers + workload.init_containers:
        requests, limits = _quantities(container, "requests"), _quantities(container, "limits")
        where = f"container {container.get('name')}"
        for resource, request in requests.items():
            if resource.startswith(EXTENDED_PREFIXES):
                if limits.get(resource) != request:
                    workload.findings.append(f"{where}: {resource} request must equal its limit (extended resource)")
                if request != request.to_integral_value():
                    workload.findings.append(f"{where}: {resource} must be a whole number")
            elif resource in limits and request > limits[resource]:
                workload.findings.append(
                    f"{where}: {resource} request {_show(resource, request)} must be less than or equal to {resource} limit "
                    f"{_show(resource, limits[resource])}"
                )


def _pod_security(workload: Workload, namespace: Namespace | None) -> None:
    level = (namespace.labels if namespace else {}).get("pod-security.kubernetes.io/enforce", "privileged")
    if level == "privileged":
        return
    pod = workload.pod
    found = workload.findings
    pod_context = pod.get("securityContext") or {}
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(flag):
            found.append(f"Pod Security {level}: {flag} is not allowed")
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if "hostPath" in kinds:
            found.append(f"Pod Security {level}: hostPath volume {volume['name']}")
        elif level == "restricted" and not kinds <= RESTRICTED_VOLUMES:
            found.append(f"Pod Security restricted: volume {volume['name']} of type {', '.join(sorted(kinds))}")
    for container in workload.containers + workload.init_containers:
        context = container.get("securityContext") or {}
        where = f"Pod Security {level}: container {container.get('name')}"
        if context.get("privileged"):
            found.append(f"{where} is privileged")
        added = set((context.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            found.append(f"{where} adds capabilities {', '.join(sorted(added - BASELINE_CAPABILITIES))}")
        if any(port.get("hostPort") for port in container.get("ports") or []):
            found.append(f"{where} uses a hostPort")
        seccomp = (context.get("seccompProfile") or pod_context.get("seccompProfile") or {}).get("type")
        if seccomp == "Unconfined":
            found.append(f"{where}: seccomp Unconfined")
        if level != "restricted":
            continue
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{where} must set allowPrivilegeEscalation: false")
        if "ALL" not in ((context.get("capabilities") or {}).get("drop") or []):
            found.append(f"{where} must drop ALL capabilities")
        if added - {"NET_BIND_SERVICE"}:
            found.append(f"{where} may add only NET_BIND_SERVICE")
        if not context.get("runAsNonRoot", pod_context.get("runAsNonRoot")):
            found.append(f"{where} must run as non-root (runAsNonRoot: true)")
        if context.get("runAsUser", pod_context.get("runAsUser")) == 0:
            found.append(f"{where} must not run as UID 0")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{where} needs seccompProfile RuntimeDefault or Localhost")


def _knative_webhook(workload: Workload, features: dict[str, str]) -> None:
    if not workload.knative:
        return
    pod = workload.pod
    found = workload.findings

    def enabled(flag: str) -> bool:
        return features.get(flag, "enabled" if flag in KNATIVE_FEATURES_ON_BY_DEFAULT else "disabled") in ("enabled", "allowed")

    for key, flag in KNATIVE_FEATURE_FIELDS.items():
        if pod.get(key) not in (None, [], {}, False) and not enabled(flag):
            found.append(f"Knative refuses spec.template.spec.{key} unless config-features enables {flag}")
    if KNATIVE_TERMINATION_GRACE in pod:
        found.append(f"Knative refuses spec.template.spec.{KNATIVE_TERMINATION_GRACE} (it sets the grace period itself)")
    # Without kubernetes.podspec-securitycontext the pod's securityContext takes nothing but a
    # seccompProfile, and that only under secure-pod-defaults (fieldmask.go PodSecurityContextMask).
    allowed_security = {"seccompProfile"} if enabled("secure-pod-defaults") else set()
    extra_security = set(pod.get("securityContext") or {}) - allowed_security
    if extra_security and not enabled("kubernetes.podspec-securitycontext"):
        found.append(
            f"Knative refuses pod securityContext fields {', '.join(sorted(extra_security))} unless "
            "kubernetes.podspec-securitycontext is enabled"
        )
    for volume in pod.get("volumes") or []:
        for kind in set(volume) - {"name"}:
            if kind not in KNATIVE_VOLUME_FLAGS:
                found.append(f"Knative refuses {kind} volume {volume['name']}")
            elif (volume_flag := KNATIVE_VOLUME_FLAGS[kind]) is not None and not enabled(volume_flag):
                found.append(f"Knative refuses {kind} volume {volume['name']} unless config-features enables {volume_flag}")
    serving = [c for c in pod.get("containers") or [] if c.get("ports")]
    if len(pod.get("containers") or []) > 1 and len(serving) != 1:
        found.append("Knative needs exactly one container with a port when a revision has several containers")
    for container in pod.get("containers") or []:
        name = container.get("name")
        for key in KNATIVE_FORBIDDEN_CONTAINER_FIELDS:
            if key in container:
                found.append(f"Knative refuses container {name} field {key}")
        if len(container.get("ports") or []) > 1:
            found.append(f"Knative allows one port per container, {name} has {len(container['ports'])}")
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            found.append(f"Knative refuses container {name} privileged: true")
        if (context.get("capabilities") or {}).get("add") and not enabled("kubernetes.containerspec-addcapabilities"):
            found.append(
                f"Knative refuses container {name} capabilities.add unless kubernetes.containerspec-addcapabilities is enabled"
            )


def _knative_features(objects: list[dict[str, Any]]) -> dict[str, str]:
    for serving in _by_kind(objects, "KnativeServing", "operator.knative.dev/"):
        return dict(((serving.get("spec") or {}).get("config") or {}).get("features") or {})
    return {}


# --- quota ----------------------------------------------------------------------------------


def _in_scope(quota: dict[str, Any], workload: Workload) -> bool:
    selector = (quota.get("spec") or {}).get("scopeSelector") or {}
    klass = workload.pod.get("priorityClassName", "")
    for expression in selector.get("matchExpressions") or []:
        if expression.get("scopeName") != "PriorityClass":
            continue
        # A pod's priority class is present when it names one; an operator it does not know is ignored here.
        holds = requirement_holds(str(expression.get("operator")), bool(klass), klass, set(expression.get("values") or []))
        if holds is False:
            return False
    return True


def _quota_requirements(workload: Workload, quota: dict[str, Any]) -> None:
    """Quota'd compute resources every container must state (enforcePodContainerConstraints)."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    name = _ns_name(quota)[1]
    for key in hard:
        kind, _, resource = key.partition(".")
        if kind not in ("requests", "limits") or resource not in COMPUTE:
            if key in COMPUTE:  # a bare `cpu`/`memory` quota means requests
                kind, resource = "requests", key
            else:
                continue
        for container in workload.containers + workload.init_containers:
            if resource not in ((container.get("resources") or {}).get(kind) or {}):
                workload.findings.append(
                    f"ResourceQuota {name}: container {container.get('name')} must specify {kind}.{resource}"
                )


def _peaks(all_workloads: list[Workload], server_peaks: Sequence[dict[str, Any]]) -> None:
    """Each workload's pods at peak: what the plan exports for model servers, else the
    workload's own maximum plus its rollout surge."""
    planned = {(p["namespace"], p["name"]): int(p["peakPods"]) for p in server_peaks}
    for workload in all_workloads:
        workload.peak = planned.get((workload.namespace, workload.name), workload.max_replicas + workload.surge)


def _quota_usage(all_workloads: list[Workload], namespaces: dict[str, Namespace]) -> list[str]:
    findings = []
    for ns_name, namespace in sorted(namespaces.items()):
        for quota in namespace.quotas:
            scoped = [w for w in all_workloads if w.namespace == ns_name and _in_scope(quota, w)]
            for w in scoped:
                _quota_requirements(w, quota)
            # Each pod's totals once per quota, not once per key it limits.
            totals = {"requests": [w.pod_requests() for w in scoped], "limits": [w.pod_limits() for w in scoped]}
            hard = (quota.get("spec") or {}).get("hard") or {}
            for key, text in sorted(hard.items()):
                if key == "pods":
                    used = Decimal(sum(w.peak for w in scoped))
                    resource = "pods"
                else:
                    kind, _, resource = key.partition(".")
                    if kind not in ("requests", "limits"):
                        kind, resource = "requests", key
                    used = sum(
                        (pod.get(resource, Decimal(0)) * w.peak for w, pod in zip(scoped, totals[kind], strict=True)),
                        Decimal(0),
                    )
                allowed = parse_quantity(str(text))
                if used > allowed:
                    who = ", ".join(f"{w.name} x{w.peak}" for w in scoped)
                    findings.append(
                        f"ResourceQuota {ns_name}/{_ns_name(quota)[1]}: {key} at peak is {_show(resource, used)} "
                        f"but the quota allows {_show(resource, allowed)} ({who})"
                    )
    return findings


# --- scheduling -----------------------------------------------------------------------------


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") not in (None, "", taint.get("effect")):
            continue
        if toleration.get("operator") == "Exists" and toleration.get("key") in (None, "", taint.get("key")):
            return True
        if toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def _untolerated(pool: PoolTemplate, tolerations: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The pool's taints that keep this pod off its nodes."""
    return [t for t in pool.taints if t.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(tolerations, t)]


def _asks_for_extended_resources(workload: Workload) -> bool:
    return any(
        resource.startswith(EXTENDED_PREFIXES)
        for container in workload.containers + workload.init_containers
        for kind in ("requests", "limits")
        for resource in ((container.get("resources") or {}).get(kind) or {})
    )


def _pool_for(workload: Workload, pools: list[PoolTemplate]) -> PoolTemplate | None:
    selector = workload.pod.get("nodeSelector") or {}
    tolerations = workload.pod.get("tolerations") or []
    if not selector:
        if _asks_for_extended_resources(workload):
            workload.findings.append("no nodeSelector: a model server names the pool it runs on")
            return None
        # The scheduler may put it on any node whose taints it tolerates.
        open_to_it = [p for p in pools if not _untolerated(p, tolerations)]
        if not open_to_it:
            workload.left_to_cluster_scheduler = True
            return None
        return open_to_it[0]
    matching = [p for p in pools if all(p.labels.get(k) == v for k, v in selector.items())]
    if not matching:
        workload.findings.append(f"no node pool has the labels of its nodeSelector {selector}")
        return None
    pool = matching[0]
    for taint in _untolerated(pool, tolerations):
        workload.findings.append(
            f"does not tolerate pool {pool.name}'s taint {taint['key']}={taint.get('value', '')}:{taint['effect']}"
        )
    return pool


def _bin_pack(pool: PoolTemplate, members: list[Workload]) -> list[str]:
    """First-fit decreasing of every pod at peak onto the pool's nodes at maxSize."""
    nodes = [dict(pool.allocatable) for _ in range(pool.max_size)]
    # Each workload's pod requests once, shared by all its pods at peak.
    requests_of = [w.pod_requests() for w in members]

    def place(workload: Workload, requests: dict[str, Decimal], node: dict[str, Decimal]) -> bool:
        """One pod onto the node, if it fits."""
        need = {**requests, "pods": Decimal(1)}
        if not all(node.get(r, Decimal(0)) >= amount for r, amount in need.items() if amount):
            return False
        for r, amount in need.items():
            node[r] = node.get(r, Decimal(0)) - amount
        workload.placed += 1
        return True

    # A DaemonSet's pod comes with the node, before any other pod is placed on it.
    for workload, requests in zip(members, requests_of, strict=True):
        if workload.daemon:
            for node in nodes:
                place(workload, requests, node)
    pods = [(w, requests) for w, requests in zip(members, requests_of, strict=True) if not w.daemon for _ in range(w.peak)]
    gpu_first = sorted(
        pods, key=lambda p: (-sum(v for k, v in p[1].items() if k.startswith(EXTENDED_PREFIXES)), -p[1].get("cpu", 0))
    )
    for workload, requests in gpu_first:
        any(place(workload, requests, node) for node in nodes)
    findings = []
    for workload, requests in zip(members, requests_of, strict=True):
        if workload.placed < workload.peak:
            short = [
                r for r, amount in requests.items()
                if amount and amount > max(node.get(r, Decimal(0)) for node in nodes)
            ]  # fmt: skip
            findings.append(
                f"{workload.label}: {workload.peak - workload.placed} of its {workload.peak} pods at peak do not fit pool "
                f"{pool.name} "
                f"at maxSize {pool.max_size} (each needs {', '.join(f'{r} {_show(r, a)}' for r, a in sorted(requests.items()))}; "
                f"short of {', '.join(short) or 'room on any single node'})"
            )
    return findings


# --- the stage ------------------------------------------------------------------------------


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
    namespaces = _namespaces(objects)
    features = _knative_features(objects)
    priority_classes = {_ns_name(p)[1] for p in _by_kind(objects, "PriorityClass")}
    pools = [PoolTemplate.from_output(p) for p in pool_outputs]
    found = workloads(objects)
    for workload in found:
        namespace = namespaces.get(workload.namespace)
        if namespace is None:
            workload.findings.append(f"namespace {workload.namespace} is not declared")
        # In the API server's order: the controller's pod, API defaulting, the built-in mutating
        # plugins (LimitRanger), the mutating webhooks (Istio), then validation, the
        # validating plugins and webhooks, and ResourceQuota last.
        _controller_containers(workload)
        for container in workload.containers + workload.init_containers:
            _api_defaults(container)
        _limit_range_defaults(workload, namespace)
        _webhook_containers(workload, namespace)
        _validate_resources(workload)
        _limit_range_validation(workload, namespace)
        _pod_security(workload, namespace)
        _knative_webhook(workload, features)
        klass = workload.pod.get("priorityClassName")
        if klass and klass not in priority_classes and klass not in ("system-cluster-critical", "system-node-critical"):
            workload.findings.append(f"PriorityClass {klass} does not exist")
    _peaks(found, server_peaks)
    for workload in found:
        if workload.daemon:
            # A pod on each node of its pool at maxSize.
            daemon_pool = _pool_for(workload, pools)
            workload.peak = daemon_pool.max_size if daemon_pool is not None else 0
    findings = _quota_usage(found, namespaces)
    by_pool: dict[str, list[Workload]] = {}
    for workload in found:
        pool = _pool_for(workload, pools)
        if pool is not None:
            workload.pool = pool.name
            by_pool.setdefault(pool.name, []).append(workload)
    for pool in pools:
        findings += _bin_pack(pool, by_pool.get(pool.name, []))
    for workload in found:
        workload.findings = list(dict.fromkeys(workload.findings))  # one line per problem, whichever quota saw it
    findings = [f"{w.label}: {f}" for w in found for f in w.findings] + findings
    return AdmissionResult(found, findings)
