"""Pod security: the Pod Security Standards' baseline for every pod, and the restricted profile's identity rules for
GPU pods."""

from __future__ import annotations

from typing import Any, Mapping

from .kube import Report, containers, every_container, get, pod_template
from .workloads import gpu_pod

# Pod Security Standards (kubernetes/pod-security-admission v0.33.0, policy/): SELinux types
# a pod may ask for (check_seLinuxOptions.go, 1.31+), the one capability a container may add
# (check_capabilities_restricted.go).
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


ADDABLE_CAPABILITIES = {"NET_BIND_SERVICE"}


# The rest of the baseline, as kubernetes/pod-security-admission v0.33.0 checks it (policy/, with
# k8s.io/api v0.33.0's constants), stricter in one place: AppArmor and seccomp profiles
# RuntimeDefault or Localhost, in the fields and in the deprecated annotations, which v0.33.0 reads
# for seccomp only at levels before 1.19 (check_appArmorProfile.go, check_seccompProfile_baseline.go);
# procMount Default (check_procMount.go); no Windows hostProcess (check_windowsHostProcess.go);
# only the safe sysctls of its newest level, 1.32 (check_sysctls.go sysctlsAllowedV1Dot32).
PROFILE_TYPES = {"RuntimeDefault", "Localhost"}


APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"


SECCOMP_POD_ANNOTATION = "seccomp.security.alpha.kubernetes.io/pod"


SECCOMP_CONTAINER_ANNOTATION_PREFIX = "container.seccomp.security.alpha.kubernetes.io/"


SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
    }
)


def _profiles(security: Mapping[str, Any], where: str, report_violation: Report) -> None:
    for field in ("appArmorProfile", "seccompProfile"):
        kind = get(security, field, "type")
        if kind is not None and kind not in PROFILE_TYPES:
            report_violation(f"{where} sets {field}.type {kind!r}: only RuntimeDefault or Localhost")
    if get(security, "windowsOptions", "hostProcess") is True:
        report_violation(f"{where} sets windowsOptions.hostProcess: pods do not run as the node's processes")


def _profile_annotations(annotations: Mapping[str, Any], report_violation: Report) -> None:
    for key, value in sorted(annotations.items()):
        value = str(value)
        if (
            key.startswith(APPARMOR_ANNOTATION_PREFIX)
            and value
            and value != "runtime/default"
            and not value.startswith("localhost/")
        ):
            report_violation(f"annotation {key}={value!r}: only runtime/default or a localhost/ AppArmor profile")
        seccomp = key == SECCOMP_POD_ANNOTATION or key.startswith(SECCOMP_CONTAINER_ANNOTATION_PREFIX)
        if seccomp and value not in ("runtime/default", "docker/default") and not value.startswith("localhost/"):
            report_violation(f"annotation {key}={value!r}: only runtime/default or a localhost/ seccomp profile")


def pod_security_baseline(args: Any, report_violation: Report) -> None:
    """Every pod the stack declares, GPU or not: the Pod Security Standards' whole baseline (host
    namespaces, hostPath, host ports, privileged, SELinux, AppArmor, seccomp, procMount, Windows
    hostProcess, sysctls), plus no added capability but NET_BIND_SERVICE and no privilege
    escalation asked for (restricted).
    `hostUsers: false` (a user namespace) is fine: it only takes privileges away."""
    template = pod_template(args.resource_type, args.props)
    if template is None:
        return
    spec = get(template, "spec", default={})
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if get(spec, field) is True:
            report_violation(f"{field} is true: pods do not share the node's namespaces")
    for volume in get(spec, "volumes", default=[]):
        if "hostPath" in volume:
            report_violation(
                f"volume '{get(volume, 'name', default='?')}' is a hostPath: pods must not mount the node's filesystem"
            )
    for ephemeral in get(spec, "ephemeralContainers", default=[]):
        report_violation(
            f"ephemeral container '{get(ephemeral, 'name', default='?')}' is declared in the pod template: debug containers "
            "are added to a running pod (kubectl debug), never shipped in a template"
        )
    _selinux(get(spec, "securityContext", "seLinuxOptions"), "the pod", report_violation)
    _profiles(get(spec, "securityContext", default={}), "the pod", report_violation)
    _profile_annotations(get(template, "metadata", "annotations", default={}), report_violation)
    for sysctl in get(spec, "securityContext", "sysctls", default=[]):
        name = str(get(sysctl, "name", default=""))
        if name not in SAFE_SYSCTLS:
            report_violation(
                f"the pod sets sysctl {name!r}: only the baseline's safe sysctls ({', '.join(sorted(SAFE_SYSCTLS))})"
            )
    for container in every_container(spec):
        name = get(container, "name", default="?")
        security = get(container, "securityContext", default={})
        if get(security, "privileged") is True:
            report_violation(f"container '{name}' is privileged")
        if get(security, "allowPrivilegeEscalation") is True:
            report_violation(f"container '{name}' allows privilege escalation")
        added = sorted(set(get(security, "capabilities", "add", default=[])) - ADDABLE_CAPABILITIES)
        if added:
            report_violation(f"container '{name}' adds capabilities {', '.join(added)}: only NET_BIND_SERVICE may be added")
        for port in get(container, "ports", default=[]):
            if get(port, "hostPort", default=0):
                report_violation(f"container '{name}' binds hostPort {port['hostPort']}: pods do not take the node's ports")
        _selinux(get(security, "seLinuxOptions"), f"container '{name}'", report_violation)
        _profiles(security, f"container '{name}'", report_violation)
        mount = get(security, "procMount")
        if mount is not None and mount != "Default":
            report_violation(f"container '{name}' sets procMount {mount!r}: only Default")


def _selinux(options: Mapping[str, Any] | None, where: str, report_violation: Report) -> None:
    if not options:
        return
    kind = get(options, "type", default="")
    if kind not in SELINUX_TYPES:
        report_violation(f"{where} asks for SELinux type {kind!r}; allowed: {', '.join(sorted(t for t in SELINUX_TYPES if t))}")
    for field in ("user", "role"):
        if get(options, field):
            report_violation(f"{where} sets seLinuxOptions.{field}: a custom SELinux {field} is forbidden")


def model_server_hardening(args: Any, report_violation: Report) -> None:
    """GPU pods, on top of the baseline every pod meets: the restricted profile's identity rules."""
    found = gpu_pod(args)
    if found is None:
        return
    spec, _ = found
    pod_security = get(spec, "securityContext", default={})
    for container in containers(spec):
        name = get(container, "name", default="?")
        security = get(container, "securityContext", default={})
        if not (
            get(security, "runAsNonRoot") is True
            or (get(pod_security, "runAsNonRoot") is True and get(security, "runAsNonRoot") is not False)
        ):
            report_violation(f"container '{name}' may run as root: set runAsNonRoot")
        if get(security, "allowPrivilegeEscalation") is not False:
            report_violation(f"container '{name}' allows privilege escalation: set allowPrivilegeEscalation false")
        if "ALL" not in get(security, "capabilities", "drop", default=[]):
            report_violation(f"container '{name}' keeps Linux capabilities: drop ALL")
