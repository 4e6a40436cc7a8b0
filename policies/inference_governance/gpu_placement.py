"""GPU workloads' resources and placement: GPU limits with CPU and memory requests, GPU-less pods on GPU nodes, the
pool a GPU pod names, and replicas spread over nodes."""

from __future__ import annotations

from typing import Any, Mapping

from .kube import (
    GPU_NODE_POOL,
    GPU_SHARING_LABEL,
    GPU_TAINT_KEY,
    NO_GPU_ENV,
    POOL_LABEL,
    Report,
    every_container,
    get,
    gpu_resources,
    name_of,
    pod_gpu_resources,
    pod_template,
    workload_containers,
)
from .workloads import NODE_GROUP, gpu_pod, gpu_workloads, of_type


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


def gpu_pools(args: Any) -> set[str]:
    """The pools of the stack that offer GPUs: its GPU pool components, and node groups labelled
    with a GPU sharing mode."""
    found = {get(c.props, "pool") for c in of_type(args, GPU_NODE_POOL) if get(c.props, "pool")}
    for group in of_type(args, NODE_GROUP):
        labels = get(group.props, "labels", default={})
        if labels.get(POOL_LABEL) and labels.get(GPU_SHARING_LABEL):
            found.add(labels[POOL_LABEL])
    return found


def gpu_pod_placement(args: Any, report_violation: Report) -> None:
    """GPU pods name the pools they run on (nodeSelector or required node affinity on the pool
    label), and those pools are GPU pools: the pool rules (time-slicing, spot, capacity) can
    only hold for pods whose pool is known."""
    known = gpu_pools(args)
    for workload in gpu_workloads(args):
        if workload.pools is None:
            report_violation(
                f"{workload.label} uses a GPU but names no pool: place it with a nodeSelector or a required node affinity "
                f"on {POOL_LABEL}",
                workload.resource.urn,
            )
        elif not workload.pools:
            report_violation(
                f"{workload.label}: its nodeSelector and required node affinity name no pool in common, so it can never be "
                "scheduled",
                workload.resource.urn,
            )
        elif known and workload.pools - known:
            report_violation(
                f"{workload.label} uses a GPU but may be placed on {', '.join(sorted(workload.pools - known))}, not a GPU "
                f"pool of this stack (GPU pools: {', '.join(sorted(known))})",
                workload.resource.urn,
            )


def topology_spread(args: Any, report_violation: Report) -> None:
    """Advisory: replicated GPU Deployments should spread over nodes (one node lost, not all)."""
    if args.resource_type != "kubernetes:apps/v1:Deployment":
        return
    found = gpu_pod(args)
    if found is None:
        return
    spec, _ = found
    if not get(spec, "topologySpreadConstraints") and not get(spec, "affinity", "podAntiAffinity"):
        report_violation(f"{name_of(args.props)} has no topology spread or anti-affinity: its replicas may share one node")
