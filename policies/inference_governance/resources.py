"""Resource validators: each looks at one resource's properties."""

from __future__ import annotations

import re
from typing import Any, Mapping

import pulumi

from .kube import (
    HPA_V2,
    KNATIVE_SERVICE,
    LATENCY_LABEL,
    Report,
    config,
    containers,
    get,
    gpu_resources,
    image_is_pinned,
    is_list,
    name_of,
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
    minimum = int(config(args).get("minTerminationGracePeriodSeconds", 300))
    grace = get(spec, "terminationGracePeriodSeconds", default=30)
    if grace < minimum:
        report_violation(
            f"terminationGracePeriodSeconds is {grace}; inference pods need at least {minimum} s to finish in-flight requests"
        )
    for container in get(spec, "containers", default=[]):
        if gpu_resources(container) and not get(container, "lifecycle", "preStop"):
            report_violation(
                f"container '{get(container, 'name', default='?')}' has no preStop hook: it would get SIGTERM while still in "
                "the load balancers"
            )


def is_production(args: Any) -> bool:
    """Decided by the pack's config (the stack names that are production), never by the stack's
    own config, which the governed stack could change."""
    return pulumi.get_stack() in config(args).get("productionStacks", ["prod", "production"])


def hpa_behavior(args: Any, report_violation: Report) -> None:
    if args.resource_type != HPA_V2:
        return
    settings = config(args)
    spec = get(args.props, "spec", default={})
    low, high = get(spec, "minReplicas", default=1), get(spec, "maxReplicas", default=0)
    if high < low:
        report_violation(f"maxReplicas {high} is below minReplicas {low}")
    floor = int(settings.get("minReplicasInProduction", 2))
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
    window = int(settings.get("minScaleDownStabilizationSeconds", 300))
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


def knative_autoscaling(args: Any, report_violation: Report) -> None:
    if args.resource_type != KNATIVE_SERVICE:
        return
    template = get(args.props, "spec", "template", default={})
    annotations = get(template, "metadata", "annotations", default={})
    labels = get(template, "metadata", "labels", default={})
    prefix = "autoscaling.knative.dev/"
    for key in ("max-scale", "target"):
        value = annotations.get(prefix + key)
        if value in (None, "", "0"):
            report_violation(f"{prefix}{key} is not set: a Knative service must bound its scale and name its target")
    if labels.get(LATENCY_LABEL) == "true":
        try:
            minimum = int(annotations.get(prefix + "min-scale", "0") or 0)
        except ValueError:
            report_violation(f"{prefix}min-scale is {annotations.get(prefix + 'min-scale')!r}, not a whole number")
            return
        if minimum < 1:
            report_violation(
                f"latency-sensitive service with min-scale {minimum}: it would cold-start a model (minutes) on the next request"
            )


def pinned_images(args: Any, report_violation: Report) -> None:
    for container in workload_containers(args.resource_type, args.props):
        image = get(container, "image", default="")
        if not image_is_pinned(image):
            report_violation(
                f"container '{get(container, 'name', default='?')}' runs image {image!r}: pin a release tag or a digest, never "
                "'latest'"
            )


def model_server_hardening(args: Any, report_violation: Report) -> None:
    found = _gpu_pod(args)
    if found is None:
        return
    spec, _ = found
    pod_security = get(spec, "securityContext", default={})
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if get(spec, field) is True:
            report_violation(f"{field} is true: model servers do not share the node's namespaces")
    for volume in get(spec, "volumes", default=[]):
        if "hostPath" in volume:
            report_violation(
                f"volume '{get(volume, 'name', default='?')}' is a hostPath: model servers must not mount the node's filesystem"
            )
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
        if get(security, "privileged") is True:
            report_violation(f"container '{name}' is privileged")


def no_plain_secret_env(args: Any, report_violation: Report) -> None:
    for container in workload_containers(args.resource_type, args.props):
        for env in get(container, "env", default=[]):
            if SECRET_NAME.search(get(env, "name", default="")) and get(env, "value") not in (None, ""):
                report_violation(
                    f"container '{get(container, 'name', default='?')}' sets {env['name']} as a plain value: read it from a "
                    "Secret (valueFrom.secretKeyRef)"
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
