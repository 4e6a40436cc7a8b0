"""The API server's own admission of a pod: defaulting (a container with a limit and no request gets the request
equal to the limit: kubernetes pkg/apis/core/v1/defaults.go, SetDefaults_Pod), LimitRanger's defaults and bounds
(plugin/pkg/admission/limitranger/admission.go), the validation of resources (pkg/apis/core/validation,
ValidateResourceRequirements) and Pod Security admission at the namespace's `enforce` level
(k8s.io/pod-security-admission policy checks for baseline and restricted)."""

from __future__ import annotations

from typing import Any

from platform_config.quantity import parse_quantity, show_rounded

from .workloads import EXTENDED_PREFIXES, Namespace, Workload, quantities


def api_defaults(container: dict[str, Any]) -> None:
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


def limit_range_defaults(workload: Workload, namespace: Namespace | None) -> None:
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


def limit_range_validation(workload: Workload, namespace: Namespace | None) -> None:
    """LimitRanger's validating half, over every container of the final pod."""
    for item in _limit_range_items(namespace):
        for container in workload.containers + workload.init_containers:
            _limit_range_bounds(workload, container, item)


def _limit_range_bounds(workload: Workload, container: dict[str, Any], item: dict[str, Any]) -> None:
    requests, limits = quantities(container, "requests"), quantities(container, "limits")
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


def validate_resources(workload: Workload) -> None:
    for container in workload.containers + workload.init_containers:
        requests, limits = quantities(container, "requests"), quantities(container, "limits")
        where = f"container {container.get('name')}"
        for resource, request in requests.items():
            if resource.startswith(EXTENDED_PREFIXES):
                if limits.get(resource) != request:
                    workload.findings.append(f"{where}: {resource} request must equal its limit (extended resource)")
                if request != request.to_integral_value():
                    workload.findings.append(f"{where}: {resource} must be a whole number")
            elif resource in limits and request > limits[resource]:
                workload.findings.append(
                    f"{where}: {resource} request {show_rounded(resource, request)} must be less than or equal to "
                    f"{resource} limit "
                    f"{show_rounded(resource, limits[resource])}"
                )


# Pod Security Standards (k8s.io/pod-security-admission/policy, "latest").
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}


def pod_security(workload: Workload, namespace: Namespace | None) -> None:
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
