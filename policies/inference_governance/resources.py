"""Resource validators: each looks at one resource's properties."""

from __future__ import annotations

import re
from typing import Any, Mapping

from .kube import (
    FACTS,
    FLOORS,
    FORBIDDEN_TAGS,
    GPU_TAINT_KEY,
    HELM_RELEASE,
    HPA_V1,
    HPA_V2,
    KNATIVE_SERVICE,
    KNATIVE_TARGET_BURST_CAPACITY,
    NO_GPU_ENV,
    PINNED_REPOSITORIES,
    Report,
    config,
    containers,
    duration_seconds,
    every_container,
    get,
    gpu_resources,
    image_is_pinned,
    image_repository,
    image_tag,
    is_list,
    is_production,
    is_sidecar_stub,
    name_of,
    namespace_of,
    opts_out_of_injection_or_host_network,
    pod_gpu_resources,
    pod_template,
    workload_containers,
)

# Whole name parts only: HF_TOKEN and DB_PASSWORD are secrets, MAX_TOKENS and TOKENIZERS_* are not.
SECRET_NAME = re.compile(
    r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIALS?)($|_)", re.IGNORECASE
)
DRAINED_WORKLOADS = ("kubernetes:apps/v1:Deployment", "kubernetes:apps/v1:StatefulSet")


def _gpu_pod(args: Any) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
    """(pod spec, pod labels) of a workload that asks for a GPU, else None."""
    template = pod_template(args.resource_type, args.props)
    if template is None:
        return None
    spec = get(template, "spec", default={})
    if not pod_gpu_resources(spec):
        return None
    return spec, get(template, "metadata", "labels", default={})


def gpu_requests_and_limits(args: Any, report_violation: Report) -> None:
    for container in workload_containers(args.resource_type, args.props):
        gpus = gpu_resources(container)
        if not gpus:
            continue
        name = get(container, "name", default="?")
        limits = get(container, "resources", "limits", default={})
        requests = get(container, "resources", "requests", default={})
        for resource in sorted(gpus):
            if resource not in limits:
                report_violation(f"container '{name}' asks for {resource} without a limit: GPUs are allocated by limits")
            elif resource in requests and str(requests[resource]) != str(limits[resource]):
                report_violation(
                    f"container '{name}' requests {requests[resource]} but limits {limits[resource]} of {resource}: they must "
                    "be equal"
                )
        for resource in ("cpu", "memory"):
            if resource not in requests:
                report_violation(
                    f"container '{name}' uses a GPU but requests no {resource}: the scheduler cannot place it fairly"
                )


def graceful_drain(args: Any, report_violation: Report) -> None:
    if args.resource_type not in DRAINED_WORKLOADS:
        return
    found = _gpu_pod(args)
    if found is None:
        return
    spec, _ = found
    minimum = int(config(args).get("minTerminationGracePeriodSeconds", FLOORS["minTerminationGracePeriodSeconds"]))
    grace = get(spec, "terminationGracePeriodSeconds", default=30)
    if grace < minimum:
        report_violation(
            f"terminationGracePeriodSeconds is {grace}; inference pods need at least {minimum} s to finish in-flight requests"
        )
    least = int(config(args).get("minPreStopSeconds", FLOORS["minPreStopSeconds"]))
    for container in get(spec, "containers", default=[]):
        if not gpu_resources(container):
            continue
        name = get(container, "name", default="?")
        hook = get(container, "lifecycle", "preStop")
        if not hook:
            report_violation(f"container '{name}' has no preStop hook: it would get SIGTERM while still in the load balancers")
            continue
        pause = pre_stop_seconds(hook)
        if pause is not None and pause < least:
            report_violation(
                f"container '{name}' waits {pause:g} s in preStop; at least {least} s, for its endpoint to leave every load "
                "balancer before SIGTERM"
            )
        drain = flag_value(get(container, "args", default=[]), "--shutdown-timeout")
        if pause is not None and drain is not None and drain.isdigit() and pause + int(drain) > grace:
            report_violation(
                f"container '{name}': preStop {pause:g} s + vLLM --shutdown-timeout {drain} s exceed "
                f"terminationGracePeriodSeconds {grace}: the pod is killed before its requests finish"
            )


_SLEEP = re.compile(r"(?:^|[\s;&|(])sleep\s+(\d+(?:\.\d+)?)(?:s)?(?=$|[\s;&|)])")


def pre_stop_seconds(hook: Mapping[str, Any]) -> float | None:
    """How long a preStop hook holds the container before SIGTERM: a `sleep` action
    (lifecycle.preStop.sleep.seconds: LifecycleHandler.sleep in the Kubernetes 1.33 API schema) or an exec of
    `sleep N`; None when the hook does something else (an HTTP call, another command)."""
    if get(hook, "sleep") is not None:
        seconds = get(hook, "sleep", "seconds", default=0)
        return float(seconds) if isinstance(seconds, (int, float)) else None
    command = get(hook, "exec", "command", default=[])
    if not is_list(command) or not command:
        return None
    found = _SLEEP.search(" ".join(str(part) for part in command))
    return float(found.group(1)) if found else None


def flag_value(args: Any, flag: str) -> str | None:
    """The value given to a command-line flag, as `--flag value` or `--flag=value` (the last wins)."""
    value = None
    items = [str(a) for a in args] if is_list(args) else []
    for index, item in enumerate(items):
        if item == flag and index + 1 < len(items):
            value = items[index + 1]
        elif item.startswith(flag + "="):
            value = item.split("=", 1)[1]
    return value


def hpa_behavior(args: Any, report_violation: Report) -> None:
    if args.resource_type == HPA_V1:
        report_violation(
            "autoscaling/v1 HorizontalPodAutoscaler: it has no behavior (scale-down stabilization and rate) and scales on "
            "CPU only; use autoscaling/v2 with behavior.scaleDown"
        )
        return
    if args.resource_type != HPA_V2:
        return
    settings = config(args)
    spec = get(args.props, "spec", default={})
    low, high = get(spec, "minReplicas", default=1), get(spec, "maxReplicas", default=0)
    if high < low:
        report_violation(f"maxReplicas {high} is below minReplicas {low}")
    floor = int(settings.get("minReplicasInProduction", FLOORS["minReplicasInProduction"]))
    if is_production(args) and low < floor:
        report_violation(f"minReplicas is {low}; production autoscalers keep at least {floor} replicas")
    for metric in get(spec, "metrics", default=[]):
        kind = get(metric, "type")
        if kind in ("Resource", "ContainerResource"):
            name = get(metric, "resource", "name") or get(metric, "containerResource", "name")
            if name not in ("cpu", "memory"):
                report_violation(
                    f"{kind} metric on {name!r}: Resource metrics are cpu and memory only; serve GPU metrics as "
                    "Pods/Object/External metrics through prometheus-adapter"
                )
    scale_down = get(spec, "behavior", "scaleDown")
    window = int(settings.get("minScaleDownStabilizationSeconds", FLOORS["minScaleDownStabilizationSeconds"]))
    if not scale_down:
        report_violation(f"no behavior.scaleDown: set a stabilization window of at least {window} s and scale-down policies")
        return
    stabilization = get(scale_down, "stabilizationWindowSeconds", default=0)
    if stabilization < window:
        report_violation(
            f"behavior.scaleDown.stabilizationWindowSeconds is {stabilization}; at least {window} s (model servers take "
            "minutes to come back)"
        )
    policies = get(scale_down, "policies", default=[])
    if not is_list(policies) or not policies:
        report_violation("behavior.scaleDown.policies must be a list of {type: Percent|Pods, value, periodSeconds}")
        return
    for policy in policies:
        if (
            get(policy, "type") not in ("Percent", "Pods")
            or get(policy, "value", default=0) <= 0
            or not 0 < get(policy, "periodSeconds", default=0) <= 1800
        ):
            report_violation(f"invalid scale-down policy {dict(policy)}: type Percent or Pods, value > 0, periodSeconds 1..1800")
            return
    fastest = int(settings.get("maxScaleDownPercentPerMinute", FLOORS["maxScaleDownPercentPerMinute"]))
    rate = scale_down_percent_per_minute(scale_down, high)
    if rate is not None and rate > fastest:
        report_violation(
            f"behavior.scaleDown removes up to {rate:g}% of maxReplicas per minute; at most {fastest}% (a model server "
            "takes minutes to come back)"
        )


def scale_down_percent_per_minute(scale_down: Mapping[str, Any], max_replicas: float) -> float | None:
    """The fastest the HPA may scale down, in percent of maxReplicas per minute: the policies'
    rates, of which the controller applies the largest (selectPolicy Max, the default) or the
    smallest (Min); None when scale-down is Disabled (kubernetes
    pkg/controller/podautoscaler/horizontal.go: calculateScaleDownLimitWithBehaviors)."""
    select = get(scale_down, "selectPolicy", default="Max")
    if select == "Disabled":
        return None
    rates = []
    for policy in get(scale_down, "policies", default=[]):
        per_minute = 60 / get(policy, "periodSeconds")
        value = get(policy, "value")
        rates.append(value * per_minute if get(policy, "type") == "Percent" else 100 * value / max(max_replicas, 1) * per_minute)
    return (min if select == "Min" else max)(rates)


def knative_autoscaling(args: Any, report_violation: Report) -> None:
    if args.resource_type != KNATIVE_SERVICE:
        return
    template = get(args.props, "spec", "template", default={})
    annotations = get(template, "metadata", "annotations", default={})
    prefix = "autoscaling.knative.dev/"
    for key in ("max-scale", "target"):
        value = annotations.get(prefix + key)
        if value in (None, "", "0"):
            report_violation(f"{prefix}{key} is not set: a Knative service must bound its scale and name its target")
    # Any burst capacity but the program's 0 keeps Knative's activator in the request path (with a
    # 100 % target utilization, always), whose queue has no practical bound and no time bound
    # (knative/serving knative-v1.23.0 config/core/configmaps/autoscaler.yaml, pkg/activator/net/throttler.go).
    burst = annotations.get(prefix + "target-burst-capacity")
    if burst != KNATIVE_TARGET_BURST_CAPACITY:
        report_violation(
            f"{prefix}target-burst-capacity is {burst!r}, not {KNATIVE_TARGET_BURST_CAPACITY!r}: Knative's activator "
            "would hold requests in a queue with no bound in requests or time, instead of sending them straight to a "
            "replica (picked by the version's endpoint picker, or bounded by its vLLM's admission)"
        )
    # queue-proxy's breaker holds 10 x containerConcurrency waiting requests with no time bound, and
    # builds none for 0 (knative/serving knative-v1.23.0 pkg/queue/sharedmain/main.go buildBreaker).
    concurrency = get(template, "spec", "containerConcurrency", default=0)
    if concurrency:
        report_violation(
            f"containerConcurrency is {concurrency}: queue-proxy would hold requests beyond it with no time bound, until "
            "the revision's timeout (504); set 0 (the endpoint picker times the wait, or vLLM's --max-num-queued-reqs "
            "bounds it)"
        )
    if not is_production(args):
        return
    settings = config(args)
    # Knative's own defaults are a 0s scale-down delay and a 60s window (knative/serving
    # knative-v1.23.0, pkg/apis/autoscaling/register.go and config/core/configmaps/autoscaler.yaml).
    for key, floor_key in (("scale-down-delay", "minScaleDownDelaySeconds"), ("window", "minWindowSeconds")):
        floor = int(settings.get(floor_key, FLOORS[floor_key]))
        raw = annotations.get(prefix + key)
        seconds = duration_seconds(raw) if raw is not None else 0.0
        if seconds is None:
            report_violation(f"{prefix}{key} is {raw!r}, not a duration such as '5m'")
        elif seconds < floor:
            report_violation(
                f"{prefix}{key} is {seconds:g} s; production services keep at least {floor} s so a dip in load does not "
                "tear down replicas that take minutes to load a model"
            )


def _repository_allowed(repository: str, allowed: set[str]) -> bool:
    """An allowed entry names a repository, or everything under a prefix of whole path parts (a
    registry, an account's registry, an organisation)."""
    return any(repository == entry or repository.startswith(entry.rstrip("/") + "/") for entry in allowed)


def pinned_images(args: Any, report_violation: Report) -> None:
    """Images come from allowed repositories (by default the repositories of the images the
    program pins, not their whole registries: ghcr.io/llm-d/... allows no other ghcr.io image)."""
    settings = config(args)
    allowed = set(settings.get("allowedRepositories", PINNED_REPOSITORIES))
    denied = set(settings.get("deniedTags", FORBIDDEN_TAGS))
    template = pod_template(args.resource_type, args.props)
    for container in every_container(get(template, "spec", default={})) if template is not None else ():
        name = get(container, "name", default="?")
        image = str(get(container, "image", default=""))
        if is_sidecar_stub(container) and template is not None and not opts_out_of_injection_or_host_network(template):
            continue  # the mesh's injector merges its sidecar into it, image included
        repository = image_repository(image)
        if not _repository_allowed(repository, allowed):
            report_violation(
                f"container '{name}' pulls from repository {repository!r}, which is not allowed; allowed: "
                f"{', '.join(sorted(allowed))}"
            )
        if image_is_pinned(image, denied):
            continue
        tag = image_tag(image)
        if tag is None:
            report_violation(f"container '{name}' runs image {image!r} with no tag (it means 'latest'): pin a tag or a digest")
        else:
            report_violation(
                f"container '{name}' runs image {image!r}: tag {tag!r} is mutable (denied: {', '.join(sorted(denied))}); pin "
                "a release tag or a digest"
            )


def tolerates_gpu_nodes(pod_spec: Mapping[str, Any]) -> bool:
    """Whether a pod may be scheduled onto the GPU pools' nodes, which carry the GPU taint: it tolerates that key,
    or every taint (a toleration with no key and operator Exists)."""
    for toleration in get(pod_spec, "tolerations", default=[]) or []:
        key = get(toleration, "key")
        if key == GPU_TAINT_KEY or (not key and get(toleration, "operator") == "Exists"):
            return True
    return False


def gpu_less_pods_see_no_gpu(args: Any, report_violation: Report) -> None:
    """A pod that may run on a GPU node but asks for no GPU sets NVIDIA_VISIBLE_DEVICES=void in every container: the
    CUDA images set it to `all`, and where the node's default runtime is NVIDIA's the container would be given every
    GPU of the node, outside the device plugin's accounting and any tenant's quota."""
    template = pod_template(args.resource_type, args.props)
    spec = get(template, "spec", default={}) if template is not None else {}
    if template is None or not tolerates_gpu_nodes(spec) or pod_gpu_resources(spec):
        return
    for container in every_container(spec):
        env = {get(e, "name"): get(e, "value") for e in get(container, "env", default=[]) or []}
        if env.get(NO_GPU_ENV["name"]) != NO_GPU_ENV["value"]:
            report_violation(
                f"container '{get(container, 'name', default='?')}' may run on a GPU node (the pod tolerates "
                f"{GPU_TAINT_KEY}) without asking for a GPU: set {NO_GPU_ENV['name']}={NO_GPU_ENV['value']} so it "
                "sees none of the node's GPUs"
            )


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
    found = _gpu_pod(args)
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


def no_plain_secret_env(args: Any, report_violation: Report) -> None:
    for container in workload_containers(args.resource_type, args.props):
        for env in get(container, "env", default=[]):
            if SECRET_NAME.search(get(env, "name", default="")) and get(env, "value") not in (None, ""):
                report_violation(
                    f"container '{get(container, 'name', default='?')}' sets {env['name']} as a plain value: read it from a "
                    "Secret (valueFrom.secretKeyRef)"
                )


# A command-line flag or `key=value` whose name says it carries a credential.
_SECRET_FLAG = re.compile(r"^-{1,2}([A-Za-z0-9][A-Za-z0-9_-]*)$")
_SECRET_ASSIGNMENT = re.compile(r"(?:^|[\s?&;])-{0,2}([A-Za-z][A-Za-z0-9_-]*)=(\S+)")
# Kubernetes expands $(VAR) from the container's env: a reference to a secret, not the secret.
_ENV_REFERENCE = re.compile(r"^\$\([A-Za-z_][A-Za-z0-9_]*\)$")
# What a credential looks like in clear, by format, in the program's order so that both name a
# value alike (platform_config/credentials.py).
_CREDENTIALS = [(str(name), re.compile(pattern)) for name, pattern in FACTS["credentialFormats"]]


def credential_format(text: str) -> str | None:
    return next((name for name, pattern in _CREDENTIALS if pattern.search(text)), None)


def _secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).replace("-", "_")))


def secrets_in_words(words: list[str]) -> list[str]:
    """What, in a command line, passes a credential in clear: `--api-key X`, `--hf-token=X`,
    `token=X`, or a Hugging Face token itself. Names only: the values are never repeated."""
    found = []
    for index, word in enumerate(words):
        flag = _SECRET_FLAG.match(word)
        if flag and _secret_name(flag.group(1)) and index + 1 < len(words):
            following = words[index + 1]
            if not following.startswith("-") and not _ENV_REFERENCE.match(following):
                found.append(word)
        for name, value in _SECRET_ASSIGNMENT.findall(word):
            if _secret_name(name) and not _ENV_REFERENCE.match(value):
                found.append(name + "=")
        credential = credential_format(word)
        if credential is not None:
            found.append(credential)
    return found


def no_secret_args(args: Any, report_violation: Report) -> None:
    for container in workload_containers(args.resource_type, args.props):
        items = [str(item) for part in ("command", "args") for item in get(container, part, default=[])]
        words = [word for item in items for word in item.split()]
        found = set(secrets_in_words(words))
        # A format with spaces in it (a private key block) spans words.
        spanning = credential_format("\n".join(items))
        if spanning is not None and not found:
            found.add(spanning)
        for what in sorted(found):
            report_violation(
                f"container '{get(container, 'name', default='?')}' passes a credential ({what}) in its command line, where "
                "anyone who can read the pod sees it: read it from a Secret (env valueFrom.secretKeyRef) and pass $(VAR)"
            )


# A shell run with a script (`sh -c`, `sh -ec`, `bash -euo pipefail -c`, `env sh -c`, `busybox
# sh -c`): the word after its first option with a `c`.
_SHELLS = frozenset({"sh", "bash", "ash", "dash", "zsh", "ksh", "mksh"})
_WRAPPERS = frozenset({"env", "busybox"})
# Shell options that take the next word as their argument.
_OPTIONS_WITH_ARGUMENT = frozenset({"--rcfile", "--init-file"})
_S3_URI = re.compile(FACTS["s3UriPattern"])
# An S3 location as a script should name it: in single quotes (shlex.quote's form), which nothing
# inside can leave and the shell expands nothing in.
_QUOTED_S3 = re.compile(r"'(s3://[^']*)'")


def _shell_script(container: Mapping[str, Any]) -> str | None:
    words = [str(word) for part in ("command", "args") for word in get(container, part, default=[]) or []]
    # `env [-i] [VAR=value ...] sh`, `busybox sh`: the shell is the first other word.
    while words and words[0].rsplit("/", 1)[-1] in _WRAPPERS:
        words = words[1:]
        while words and (words[0].startswith("-") or "=" in words[0]):
            words = words[1:]
    if not words or words[0].rsplit("/", 1)[-1] not in _SHELLS:
        return None
    index = 1
    while index < len(words):
        word = words[index]
        if word in _OPTIONS_WITH_ARGUMENT:
            index += 2
        elif word.startswith("--"):
            index += 1  # --noprofile, --login, and `--` before the script
        elif word.startswith(("-", "+")) and "c" in word[1:]:
            rest = [w for w in words[index + 1 :] if w != "--"]
            return rest[0] if rest else ""
        elif word.startswith(("-", "+")):
            # In a cluster (`-euo pipefail`), `o` takes the next word too.
            index += 2 if set(word[1:]) & {"o", "O"} else 1
        else:
            return None  # a script file, not a command string
    return None


def shell_scripts_quote_config(args: Any, report_violation: Report) -> None:
    """The S3 locations config gives (models', adapters', batch input and output) reach the batch
    jobs' shell scripts: each is single-quoted there and is what config may give (letters, digits
    and `-_.=/` after the bucket), so no location can become shell syntax, however the program came
    to write it."""
    for container in workload_containers(args.resource_type, args.props):
        script = _shell_script(container)
        if script is None:
            continue
        name = get(container, "name", default="?")
        quoted = _QUOTED_S3.findall(script)
        if script.count("s3://") > len(quoted):
            report_violation(
                f"container '{name}' names an S3 location in its shell script outside single quotes, where the shell "
                "expands what it holds: put it in single quotes (shlex.quote leaves a word of safe characters bare)"
            )
        for location in quoted:
            if not _S3_URI.fullmatch(location):
                report_violation(
                    f"container '{name}' names S3 location {location!r} in its shell script: a location config may give "
                    "is s3://<bucket>/<letters, digits and -_.=/>, so this one came from somewhere else"
                )


def no_secret_env_from(args: Any, report_violation: Report) -> None:
    """envFrom a Secret hands every key of it to the container, whatever the Secret later holds."""
    template = pod_template(args.resource_type, args.props)
    if template is None or namespace_of(args.props) in config(args).get("allowedNamespaces", []):
        return
    for container in every_container(get(template, "spec", default={})):
        for source in get(container, "envFrom", default=[]):
            secret = get(source, "secretRef", "name")
            if secret is not None:
                report_violation(
                    f"container '{get(container, 'name', default='?')}' takes every key of Secret '{secret}' as environment "
                    "(envFrom): name the keys it needs with env valueFrom.secretKeyRef"
                )


# Keys that name where a secret is, not the secret: existingSecret, secretName, tokenFile, and
# the key inside a Secret (passwordKey; but apiKey and secretKey are credentials).
_REFERENCE_PARTS = {"EXISTING", "NAME", "REF", "FILE", "PATH", "MOUNT", "ENABLED", "CREATE", "ANNOTATIONS"}
_REFERENCE_SUFFIX = re.compile(r"(PASSWORD|PASSWD|TOKEN|CREDENTIALS?)_KEY$")


def _names_a_secret(key: str) -> bool:
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key).upper().replace("-", "_")
    return _secret_name(key) and not set(words.split("_")) & _REFERENCE_PARTS and not _REFERENCE_SUFFIX.search(words)


def _plain_secrets(value: Any, path: str) -> list[str]:
    found = []
    if isinstance(value, Mapping):
        # An env entry in values: {name: HF_TOKEN, value: ...}
        if isinstance(value.get("name"), str) and isinstance(value.get("value"), str) and value["value"]:
            if _secret_name(value["name"]) and not _ENV_REFERENCE.match(value["value"]):
                found.append(f"{path}[name={value['name']}].value")
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if isinstance(item, str) and item and _names_a_secret(str(key)):
                found.append(where)
            else:
                found += _plain_secrets(item, where)
    elif is_list(value):
        for index, item in enumerate(value):
            found += _plain_secrets(item, f"{path}[{index}]")
    elif isinstance(value, str) and credential_format(value) is not None:
        found.append(path)
    return found


def no_secrets_in_helm_values(args: Any, report_violation: Report) -> None:
    """Helm values end up in the release's Secret and in the Pulumi state in clear: a chart is
    given the name of a Secret that holds the credential (existingSecret and the like)."""
    if args.resource_type != HELM_RELEASE:
        return
    for where in _plain_secrets(get(args.props, "values", default={}), ""):
        report_violation(
            f"Helm values {where} holds a secret-looking value in clear: give the chart the name of a Secret that holds it"
        )


def topology_spread(args: Any, report_violation: Report) -> None:
    """Advisory: replicated GPU Deployments should spread over nodes (one node lost, not all)."""
    if args.resource_type != "kubernetes:apps/v1:Deployment":
        return
    found = _gpu_pod(args)
    if found is None:
        return
    spec, _ = found
    if not get(spec, "topologySpreadConstraints") and not get(spec, "affinity", "podAntiAffinity"):
        report_violation(f"{name_of(args.props)} has no topology spread or anti-affinity: its replicas may share one node")
