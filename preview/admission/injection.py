"""The containers the cluster adds to a pod, sized as their injectors size them: Knative's queue-proxy, which Knative
writes into the revision's Deployment, and Istio's sidecar, where Istio's webhook selectors and injection rule put
one (`istio_injects`)."""

from __future__ import annotations

import json
from typing import Any

from .pod_admission import api_defaults
from .workloads import Namespace, Workload

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
QUEUE_PROXY_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
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


def controller_containers(workload: Workload) -> None:
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


def webhook_containers(workload: Workload, namespace: Namespace | None) -> None:
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
        api_defaults(sidecar)
        workload.containers.append(sidecar)
