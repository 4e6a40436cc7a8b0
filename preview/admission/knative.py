"""Knative's webhook (knative/serving pkg/apis/serving/k8s_validation.go): the fields it refuses in a Knative
Service's pod, and the pod-spec fields it admits only behind a `kubernetes.podspec-*` feature flag of
config-features (the KnativeServing's `spec.config.features`)."""

from __future__ import annotations

from typing import Any

from .workloads import Workload, by_kind

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


def knative_webhook(workload: Workload, features: dict[str, str]) -> None:
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


def knative_features(objects: list[dict[str, Any]]) -> dict[str, str]:
    for serving in by_kind(objects, "KnativeServing", "operator.knative.dev/"):
        return dict(((serving.get("spec") or {}).get("config") or {}).get("features") or {})
    return {}
