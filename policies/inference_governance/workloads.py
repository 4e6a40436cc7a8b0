"""The stack's workloads and pools as the rules read them: its GPU workloads, its tenants' namespaces, its GPU
pools, and a Knative service's scale bounds."""

from __future__ import annotations

from typing import Any, Callable, Mapping, TypeVar

from .kube import (
    GPU_NODE_POOL,
    GPU_SHARING_LABEL,
    KNATIVE_SERVICE,
    NAMESPACE,
    POOL_LABEL,
    TENANT_LABEL,
    get,
    name_of,
    namespace_of,
    placement_pools,
    pod_gpu_resources,
    pod_labels,
    pod_makers,
    pod_template,
)

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
T = TypeVar("T")


def of_type(args: Any, token: str) -> list[Any]:
    return [r for r in args.resources if r.resource_type == token]


def tenant_namespaces(args: Any) -> set[str]:
    """The tenants' namespaces: those the program labels with their tenant."""
    return {name_of(n.props) for n in of_type(args, NAMESPACE) if get(n.props, "metadata", "labels", TENANT_LABEL)}


class GpuWorkload:
    def __init__(self, resource: Any):
        template = pod_template(resource.resource_type, resource.props)
        self.resource = resource
        self.spec = get(template, "spec", default={})
        self.labels = dict(get(template, "metadata", "labels", default={}))
        self.namespace = namespace_of(resource.props)
        self.name = name_of(resource.props)
        self.gpu_resources = pod_gpu_resources(self.spec)
        self.knative = resource.resource_type == KNATIVE_SERVICE
        self.pools = placement_pools(self.spec)
        self.pod_labels = pod_labels(resource.resource_type, resource.props)

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}"


# What a stack policy's helpers found in the stack last analyzed, by what was asked: its resources (one by one) and
# the answer. Every stack policy of one AnalyzeStack request reads the same resources
# (policies/inference_governance/decoding.py `_analyze_stack`), and ten of them ask for the GPU workloads.
_LAST_STACK: dict[Any, tuple[tuple[Any, ...], Any]] = {}


def once_per_stack(args: Any, question: Any, answer: Callable[[], T]) -> T:
    """`answer()` for the stack's resources, found once for however many stack policies ask `question` of the same
    resources (the same objects, in the same order; a policy handed other resources gets its own answer)."""
    resources = tuple(args.resources)
    kept = _LAST_STACK.get(question)
    # Compared one by one by identity: a PolicyResource has no equality of its own.
    if kept is not None and len(kept[0]) == len(resources) and all(a is b for a, b in zip(kept[0], resources)):
        return kept[1]
    found = answer()
    _LAST_STACK[question] = (resources, found)
    return found


def gpu_workloads(args: Any) -> list[GpuWorkload]:
    """The stack's workloads that ask for a GPU, found once per stack (`once_per_stack`); a list of the caller's own."""
    return list(once_per_stack(args, "gpu workloads", lambda: tuple(_gpu_workloads(args))))


def _gpu_workloads(args: Any) -> list[GpuWorkload]:
    out = []
    for resource in pod_makers(args):
        if pod_template(resource.resource_type, resource.props) is None:
            continue
        workload = GpuWorkload(resource)
        if workload.gpu_resources:
            out.append(workload)
    return out


def gpu_pod(args: Any) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
    """(pod spec, pod labels) of a workload that asks for a GPU, else None."""
    template = pod_template(args.resource_type, args.props)
    if template is None:
        return None
    spec = get(template, "spec", default={})
    if not pod_gpu_resources(spec):
        return None
    return spec, get(template, "metadata", "labels", default={})


def pools(args: Any) -> dict[str, dict[str, Any]]:
    """What the stack says about its GPU pools: the pool components' outputs, with the EKS node
    groups' labels and capacity type where the pools are EKS node groups."""
    found: dict[str, dict[str, Any]] = {}
    for component in of_type(args, GPU_NODE_POOL):
        props = component.props
        if get(props, "pool"):
            found[props["pool"]] = dict(props)
    for group in of_type(args, NODE_GROUP):
        labels = get(group.props, "labels", default={})
        name = labels.get(POOL_LABEL)
        if name:
            pool = found.setdefault(name, {"pool": name})
            pool.setdefault("sharing", labels.get(GPU_SHARING_LABEL))
            pool["capacityType"] = get(group.props, "capacityType", default="ON_DEMAND")
    return found


def knative_scale(workload: GpuWorkload, key: str, default: int) -> int:
    annotations = get(workload.resource.props, "spec", "template", "metadata", "annotations", default={})
    try:
        return int(annotations.get(f"autoscaling.knative.dev/{key}", default) or 0)
    except ValueError:
        return default
