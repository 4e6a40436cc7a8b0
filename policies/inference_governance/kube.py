"""Reading Kubernetes objects out of Pulumi resource properties (camelCase, as sent), and the
validators' shared plumbing."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Callable, Iterator

import pulumi

# Generated from the platform's own modules (components/policy_facts.py); a test keeps it fresh.
FACTS = json.loads((Path(__file__).resolve().parent / "platform_facts.json").read_text())

GPU_RESOURCE: str = FACTS["gpuResource"]
MIG_PREFIX: str = FACTS["migResourcePrefix"]
MIG_PROFILES: dict[str, set[str]] = {gpu: set(profiles) for gpu, profiles in FACTS["migProfiles"].items()}

WORKLOAD_TYPES = {
    "kubernetes:apps/v1:Deployment": ("spec", "template"),
    "kubernetes:apps/v1:StatefulSet": ("spec", "template"),
    "kubernetes:apps/v1:DaemonSet": ("spec", "template"),
    "kubernetes:apps/v1:ReplicaSet": ("spec", "template"),
    "kubernetes:batch/v1:Job": ("spec", "template"),
    "kubernetes:batch/v1:CronJob": ("spec", "jobTemplate", "spec", "template"),
    "kubernetes:serving.knative.dev/v1:Service": ("spec", "template"),
    "kubernetes:serving.knative.dev/v1:Configuration": ("spec", "template"),
}
POD = "kubernetes:core/v1:Pod"
KNATIVE_SERVICE = "kubernetes:serving.knative.dev/v1:Service"
HPA_V2 = "kubernetes:autoscaling/v2:HorizontalPodAutoscaler"
HPA_V1 = "kubernetes:autoscaling/v1:HorizontalPodAutoscaler"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
QUOTA = "kubernetes:core/v1:ResourceQuota"
PRIORITY_CLASS = "kubernetes:scheduling.k8s.io/v1:PriorityClass"
VIRTUAL_SERVICE = "kubernetes:networking.istio.io/v1:VirtualService"
DESTINATION_RULE = "kubernetes:networking.istio.io/v1:DestinationRule"
SERVICE_MONITOR = "kubernetes:monitoring.coreos.com/v1:ServiceMonitor"
POD_MONITOR = "kubernetes:monitoring.coreos.com/v1:PodMonitor"
GPU_NODE_POOL = "inference-platform:gpu-node-pool:GpuNodePool"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
SERVICE = "kubernetes:core/v1:Service"
NAMESPACE = "kubernetes:core/v1:Namespace"
INFERENCE_POOL = "kubernetes:inference.networking.k8s.io/v1:InferencePool"
PEER_AUTHENTICATION = "kubernetes:security.istio.io/v1:PeerAuthentication"
AUTHORIZATION_POLICY = "kubernetes:security.istio.io/v1:AuthorizationPolicy"
REQUEST_AUTHENTICATION = "kubernetes:security.istio.io/v1:RequestAuthentication"
ISTIO_GATEWAY = "kubernetes:networking.istio.io/v1:Gateway"
ISTIO_SIDECAR = "kubernetes:networking.istio.io/v1:Sidecar"
SERVICE_ENTRY = "kubernetes:networking.istio.io/v1:ServiceEntry"
GATEWAY_NAMESPACE: str = FACTS["gateway"]["namespace"]
GATEWAY_SELECTOR: dict[str, str] = FACTS["gateway"]["selector"]
GATEWAY_LISTENER_PORTS: dict[int, int] = {int(k): v for k, v in FACTS["gateway"]["listenerPorts"].items()}
# The program's labels for an endpoint picker's objects and a tenant's namespace
# (components/constants.py LABEL_COMPONENT and LABEL_TENANT, components/specs/endpoint_picker/names.py
# COMPONENT); a test holds them to the program's.
COMPONENT_LABEL = "app.kubernetes.io/component"
ENDPOINT_PICKER = "endpoint-picker"
TENANT_LABEL = "inference.platform/tenant"
# Istio's per-pod injection switch, as a pod label or (deprecated) annotation.
SIDECAR_INJECT = "sidecar.istio.io/inject"
# Values of sidecar.istio.io/inject that ask for the sidecar. Any other value but the empty one
# opts the pod out; the label wins over the annotation, even when empty (istio
# pkg/kube/inject/inject.go injectRequired, which compares the value lower-cased).
INJECT_ASKED = {"y", "yes", "true", "on"}
LATENCY_LABEL: str = FACTS["labels"]["latencySensitive"]
# The label on a model server's pods naming its model.
MODEL_LABEL: str = FACTS["labels"]["model"]
KNATIVE_TARGET_BURST_CAPACITY: str = FACTS["knative"]["targetBurstCapacity"]
POOL_LABEL: str = FACTS["labels"]["pool"]
GPU_SHARING_LABEL: str = FACTS["labels"]["gpuSharing"]
GPU_TAINT_KEY: str = FACTS["gpuTaint"]["key"]
NO_GPU_ENV: dict[str, str] = FACTS["noGpuEnv"]
OVERRIDE_HEADER_ANNOTATION: str = FACTS["annotations"]["overrideHeader"]
# Set by Knative on its pods: the pods of a Knative Service carry its name under this key.
KNATIVE_SERVICE_LABEL: str = FACTS["labels"]["knativeService"]
KNATIVE_REVISION_LABEL: str = FACTS["labels"]["knativeRevision"]
DEFAULT_OVERRIDE_HEADER: str = FACTS["defaults"]["overrideHeader"]
PRODUCTION_PRIORITY_CLASS: str = FACTS["defaults"]["productionPriorityClass"]
DEFAULT_TIER_HEADER: str = FACTS["defaults"]["tierHeader"]
# The label Kueue queues a Job by (its LocalQueue's name), and the LocalQueue's type token
# (components/specs/kueue.py QUEUE_NAME_LABEL, KUEUE_API_VERSION).
QUEUE_NAME_LABEL: str = FACTS["kueue"]["queueNameLabel"]
LOCAL_QUEUE: str = FACTS["kueue"]["localQueueType"]
BATCH_JOB = "kubernetes:batch/v1:Job"
CRON_JOB = "kubernetes:batch/v1:CronJob"
# Policy config defaults the program's config checks share (platform_config/floors.py).
FLOORS: dict[str, float] = FACTS["floors"]
# The stacks that are production, unless the pack's config (productionStacks) says otherwise.
PRODUCTION_STACKS = ["prod", "production"]


Report = Callable[..., None]


def config(args: Any) -> dict[str, Any]:
    """The policy's config as the engine sent it (schema defaults filled in)."""
    return args.get_config() or {}


def is_production(args: Any) -> bool:
    """Decided by the pack's config (the stack names that are production), never by the stack's
    own config, which the governed stack could change."""
    return pulumi.get_stack() in config(args).get("productionStacks", PRODUCTION_STACKS)


def get(obj: Any, *path: str | int, default: Any = None) -> Any:
    for key in path:
        if isinstance(key, int):
            if not is_list(obj) or key >= len(obj):
                return default
            obj = obj[key]
        else:
            if not isinstance(obj, Mapping):
                return default
            # One lookup, not `in` and then the item: the policy SDK's views answer `in` by reading the item
            # (collections.abc Mapping.__contains__), a value unknown at preview raising either way.
            try:
                obj = obj[key]
            except KeyError:
                return default
    return default if obj is None else obj


def is_list(value: Any) -> bool:
    """Lists arrive as the policy SDK's read-only Sequence proxies, not as list."""
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def pod_makers(args: Any) -> Iterator[Any]:
    """The stack's resources whose objects run pods, found by their type alone: a stack policy that reads the pods of
    every workload reads no other resource's properties (the pack decodes a resource's properties when a rule first
    reads them, policies/inference_governance/decoding.py)."""
    return (r for r in args.resources if r.resource_type == POD or r.resource_type in WORKLOAD_TYPES)


def pod_template(resource_type: str, props: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """{metadata, spec} of the pods a workload runs, or None if it runs none."""
    if resource_type == POD:
        return props
    path = WORKLOAD_TYPES.get(resource_type)
    return get(props, *path) if path else None


def pod_labels(resource_type: str, props: Mapping[str, Any]) -> dict[str, str]:
    """The labels a workload's pods carry: its template's, and for a Knative Service those Knative
    adds, the service's name and, where the template names its revision, the revision's."""
    template = pod_template(resource_type, props)
    labels = dict(get(template, "metadata", "labels", default={})) if template is not None else {}
    if resource_type == KNATIVE_SERVICE:
        labels[KNATIVE_SERVICE_LABEL] = name_of(props)
        revision = get(template, "metadata", "name") if template is not None else None
        if revision:
            labels[KNATIVE_REVISION_LABEL] = revision
    return labels


def containers(pod_spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield from get(pod_spec, "initContainers", default=[])
    yield from get(pod_spec, "containers", default=[])


def every_container(pod_spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The containers Pod Security admission visits: init, regular and ephemeral
    (kubernetes/pod-security-admission v0.33.0, policy/visitor.go: visitContainers)."""
    yield from containers(pod_spec)
    yield from get(pod_spec, "ephemeralContainers", default=[])


def workload_containers(resource_type: str, props: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Every container of the pods a workload runs (none if it runs no pods)."""
    template = pod_template(resource_type, props)
    if template is not None:
        yield from containers(get(template, "spec", default={}))


def is_gpu_resource(name: str) -> bool:
    return name == GPU_RESOURCE or name.startswith(MIG_PREFIX)


def gpu_resources(container: Mapping[str, Any]) -> set[str]:
    names = set(get(container, "resources", "limits", default={})) | set(get(container, "resources", "requests", default={}))
    return {n for n in names if is_gpu_resource(n)}


def pod_gpu_resources(pod_spec: Mapping[str, Any]) -> set[str]:
    return {r for c in containers(pod_spec) for r in gpu_resources(c)}


def namespace_of(props: Mapping[str, Any]) -> str:
    return get(props, "metadata", "namespace", default="default")


def name_of(props: Mapping[str, Any]) -> str:
    return get(props, "metadata", "name", default="?")


def fqdn(host: str, namespace: str) -> str:
    return host if "." in host else f"{host}.{namespace}.svc.cluster.local"


def whole_number(value: Any) -> int | None:
    """A whole number (a replica count, a port) as the analyzer hands it over (numbers come as floats), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        return None
    return int(value)


def placement_pools(pod_spec: Mapping[str, Any]) -> set[str] | None:
    """The pools a pod may be scheduled on, by its nodeSelector and its required node affinity
    on the pool label (both must hold; the affinity's terms are ORed), or None when neither
    names a pool: then the pod may land on any node that has what it asks for."""
    pools: set[str] | None = None
    selected = get(pod_spec, "nodeSelector", POOL_LABEL)
    if selected is not None:
        pools = {selected}
    terms = get(pod_spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
    if terms:
        allowed: set[str] = set()
        for term in terms:
            named = [
                set(get(e, "values", default=[]))
                for e in get(term, "matchExpressions", default=[])
                if get(e, "key") == POOL_LABEL and get(e, "operator") == "In"
            ]
            if not named:
                return pools  # a term that names no pool lets the pod go anywhere else it fits
            allowed |= set.intersection(*named)
        pools = allowed if pools is None else pools & allowed
    return pools


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(value: Any) -> float | None:
    """A Go duration ("5m", "1m30s", "0") in seconds, as Knative parses its duration annotations
    (time.ParseDuration); None when it is not one."""
    text = str(value).strip()
    if text == "0":
        return 0.0
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        return None
    return sum(float(number) * _DURATION_UNITS[unit] for number, unit in parts)


def model_servers(args: Any) -> Iterator[tuple[Any, tuple[str, str]]]:
    """(resource, (namespace, model)) of every workload whose pods run a model server."""
    for resource in pod_makers(args):
        template = pod_template(resource.resource_type, resource.props)
        if template is None:
            continue
        model = get(template, "metadata", "labels", MODEL_LABEL)
        if model is not None:
            yield resource, (namespace_of(resource.props), str(model))


def labels_match(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a metav1.LabelSelector (matchLabels and matchExpressions, all must hold) selects
    pods with these labels; an empty selector selects every pod, a missing one none (kubernetes
    apimachinery pkg/apis/meta/v1/helpers.go LabelSelectorAsSelector, as policy/v1 reads a PDB's)."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in get(selector, "matchLabels", default={}).items()):
        return False
    for expression in get(selector, "matchExpressions", default=[]):
        key, operator = get(expression, "key"), get(expression, "operator")
        values = set(get(expression, "values", default=[]))
        held = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }.get(operator, False)
        if not held:
            return False
    return True


def image_registry(image: str) -> str:
    """The registry an image reference pulls from: the first path part when it names a host (a
    dot, a port, upper case, or localhost), else Docker Hub (github.com/distribution/reference,
    normalize.go: splitDockerDomain, which also maps the legacy index.docker.io to docker.io)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost" or first.lower() != first):
        return "docker.io" if first == "index.docker.io" else first
    return "docker.io"


def image_repository(image: str) -> str:
    """The repository an image reference names, with its registry and without tag or digest:
    `vllm/vllm-openai:v1` is `docker.io/vllm/vllm-openai` (github.com/distribution/reference
    normalize.go: a Docker Hub name without a namespace is under `library/`)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    registry = image_registry(name)
    first, _, rest = name.partition("/")
    path = rest if rest and first in (registry, "index.docker.io") else name
    if registry == "docker.io" and "/" not in path:
        path = f"library/{path}"
    return f"{registry}/{path}"


# The repositories of the images the program pins: what the pack allows by default.
PINNED_REPOSITORIES: list[str] = sorted({image_repository(repository) for repository in FACTS["images"]["pinnedRepositories"]})

_IMAGE_TAG = re.compile(":(" + FACTS["images"]["tagPattern"] + ")$")
_IMAGE_DIGEST = re.compile("@" + FACTS["images"]["digestPattern"] + "$")


FORBIDDEN_TAGS: list[str] = FACTS["images"]["forbiddenTags"]


def image_tag(image: str) -> str | None:
    tag = _IMAGE_TAG.search(image.rsplit("/", 1)[-1])
    return tag.group(1) if tag else None


def image_has_digest(image: str) -> bool:
    """The reference names its content (`@sha256:...`), which no tag moved later changes."""
    return _IMAGE_DIGEST.search(image) is not None


def image_is_pinned(image: str, denied: Collection[str] = FORBIDDEN_TAGS) -> bool:
    """The program's rule (platform_config.models): a digest, or a tag that is not forbidden."""
    if image_has_digest(image):
        return True
    tag = image_tag(image)
    return tag is not None and tag not in denied


def injection_switch(template: Mapping[str, Any]) -> str:
    """A pod template's sidecar.istio.io/inject value, label over annotation, lower-cased ("" if unset)."""
    labels = get(template, "metadata", "labels", default={}) or {}
    annotations = get(template, "metadata", "annotations", default={}) or {}
    return str(labels.get(SIDECAR_INJECT, annotations.get(SIDECAR_INJECT, ""))).lower()


def opts_out_of_injection(template: Mapping[str, Any]) -> bool:
    """Whether a pod template's own switch keeps Istio's sidecar out (INJECT_ASKED)."""
    switch = injection_switch(template)
    return bool(switch) and switch not in INJECT_ASKED


# A container the mesh's injector merges its own sidecar into (istio 1.30.3 pkg/kube/inject/webhook.go: a pod's
# container of the sidecar's name overlays the injected one, field by field, and `image: auto` keeps the injector's
# image). Only a stub that states the sidecar's size is one: any other field (a command, args, env, its own user)
# would run in the proxy's place as the proxy's user, whose traffic istio-iptables lets out unredirected.
SIDECAR_NAME = "istio-proxy"
SIDECAR_STUB_IMAGE = "auto"
SIDECAR_STUB_FIELDS = frozenset({"name", "image", "restartPolicy", "resources", "securityContext"})
SIDECAR_STUB_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True}


def is_sidecar_stub(container: Mapping[str, Any]) -> bool:
    """Whether a container only states the size of the sidecar the injector merges into it (SIDECAR_STUB_FIELDS),
    with no security setting beyond the restricted ones the injector's own keeps."""
    if get(container, "name") != SIDECAR_NAME or get(container, "image") != SIDECAR_STUB_IMAGE:
        return False
    if not set(container) <= SIDECAR_STUB_FIELDS or get(container, "restartPolicy", default="Always") != "Always":
        return False
    security = get(container, "securityContext", default={}) or {}
    return all(key in SIDECAR_STUB_SECURITY and _plain(value) == SIDECAR_STUB_SECURITY[key] for key, value in security.items())


def _plain(value: Any) -> Any:
    """A value as plain dicts and lists (the analyzer hands over read-only proxies of them)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if is_list(value):
        return [_plain(v) for v in value]
    return value


def opts_out_of_injection_or_host_network(template: Mapping[str, Any]) -> bool:
    """Whether the injector leaves the pod without its sidecar by the pod's own doing: its switch, or the host's
    network (pkg/kube/inject/inject.go injectRequired skips hostNetwork pods)."""
    return opts_out_of_injection(template) or bool(get(template, "spec", "hostNetwork", default=False))
