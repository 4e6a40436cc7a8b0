"""The admission and scheduling stage on what the program renders: the EKS system node group's scheduling template,
every stack's pod templates admitted and scheduled and read by the stage and the pack alike, the kinds every
backend renders with pods, the first-up stage's and the diff's kinds held to the stage's, a tenant's own LimitRange,
and Kueue's count of a batch pod."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest

from preview.admission import admit_and_schedule


def test_the_tenants_own_limit_range_admits_the_model_servers(prod):
    from components.specs.tenancy import limit_range as tenant_limit_range

    tenant = prod.config.tenants[0]
    objects = [
        o
        for o in prod.manifests
        if o["metadata"].get("namespace") == tenant.name or o["kind"] in ("Namespace", "PriorityClass", "KnativeServing")
    ]
    assert any(o["kind"] == "LimitRange" for o in objects)
    assert "cpu" not in tenant_limit_range(tenant)["spec"]["limits"][0]["default"]
    result = admit_and_schedule(objects, prod.outputs["nodePools"])
    assert [w for w in result.workloads if w.namespace == tenant.name and w.findings] == []


# --- the EKS system node group's template -------------------------------------------------------

# AWS's instance type specifications (general purpose, M6i): vCPUs and GiB.
AWS_M6I = {"m6i.xlarge": (4, 16), "m6i.2xlarge": (8, 32)}


def expected_system_allocatable(vcpus: int, memory_gib: int, max_size: int, replicas: int = 1) -> dict[str, Decimal]:
    """One system node by the EKS AMI's kubelet reserve, worked out here: CPU 6 % of the first
    core, 1 % of the second, 0.5 % of the next two, 0.25 % of the rest; memory 11 MiB per pod
    (110 pods up to 30 vCPUs) + 255 MiB, and 100 MiB eviction; then the node agents' allowance and
    an equal share of every controller in the reserve table (the control plane's `replicas` times),
    rounded up to a millicore/byte/pod."""
    from components.system_nodes import SYSTEM_CONTROLLERS
    from platform_config.capacity import SYSTEM_NODE_AGENTS
    from platform_config.quantity import parse_quantity

    cpu_reserve = Decimal("0.06") + Decimal("0.01") + Decimal("0.005") * 2 + Decimal("0.0025") * (vcpus - 4)
    memory_reserve = Decimal((11 * 110 + 255 + 100) * 2**20)
    pods = {c.name: c.pods * (replicas if c.control_plane else 1) for c in SYSTEM_CONTROLLERS}
    controllers_cpu = sum(parse_quantity(c.requests["cpu"]) * pods[c.name] for c in SYSTEM_CONTROLLERS)
    controllers_memory = sum(parse_quantity(c.requests["memory"]) * pods[c.name] for c in SYSTEM_CONTROLLERS)
    controller_pods = sum(pods.values())
    return {
        "cpu": vcpus - cpu_reserve - SYSTEM_NODE_AGENTS["cpu"] - Decimal(math.ceil(controllers_cpu * 1000 / max_size)) / 1000,
        "memory": Decimal(
            math.floor(
                memory_gib * 2**30 - memory_reserve - SYSTEM_NODE_AGENTS["memory"] - math.ceil(controllers_memory / max_size)
            )
        ),
        "pods": Decimal(110 - math.ceil(Decimal(controller_pods) / max_size)),
    }


@pytest.mark.parametrize(
    "instance_type, max_size, replicas", [("m6i.xlarge", 4, 1), ("m6i.2xlarge", 6, 1), ("m6i.2xlarge", 6, 2)]
)
def test_the_system_templates_allocatable(instance_type: str, max_size: int, replicas: int):
    from components.system_nodes import system_scheduling_template
    from platform_config.models import SystemNodeGroup
    from platform_config.quantity import parse_quantity

    group = SystemNodeGroup(instance_type=instance_type, max_size=max_size)
    template = system_scheduling_template(group, replicas)
    assert (template["name"], template["labels"], template["taints"], template["maxSize"]) == (
        "system",
        {"inference.platform/pool": "system"},
        [],
        max_size,
    )
    allocatable = {resource: parse_quantity(text) for resource, text in template["allocatable"].items()}
    expected = expected_system_allocatable(*AWS_M6I[instance_type], max_size, replicas)
    assert {r: allocatable[r] for r in expected} == expected
    # 20 GiB root volume, 10 % eviction, 1 GiB kube-reserved, 10 GiB of images.
    assert allocatable["ephemeral-storage"] == Decimal(20 * 2**30) * Decimal("0.9") - 11 * 2**30


def test_the_system_reserve_counts_the_control_plane_at_the_replicas_a_stack_runs():
    from components.specs.knative import KNATIVE_CONTROL_PLANE, knative_serving
    from components.specs.mesh import istiod_values
    from components.system_nodes import system_controllers

    one, two = ({c.name: c.pods for c in system_controllers(n)} for n in (1, 2))
    assert one["istiod"] == 1 and two["istiod"] == istiod_values(2)["autoscaleMin"] == 2
    knative = [name for name in two if name.startswith(("knative activator", "knative autoscaler", "net-istio"))]
    # Every Deployment of Knative's control plane (KNATIVE_CONTROL_PLANE) at the KnativeServing's replicas.
    assert (
        sum(two[name] for name in knative)
        == len(KNATIVE_CONTROL_PLANE) * knative_serving(2)["spec"]["high-availability"]["replicas"]
    )
    assert sum(one[name] for name in knative) == len(KNATIVE_CONTROL_PLANE)
    # What runs as many replicas in every stack does not move: the gateway, Kueue's two managers.
    assert two["istio ingress gateway"] == one["istio ingress gateway"] and two["kueue controller-manager"] == 2


def test_the_system_reserve_counts_the_gateway_at_its_maximum_with_the_projects_requests():
    from components.specs.mesh import GATEWAY_RESOURCES, gateway_values
    from components.system_nodes import SYSTEM_CONTROLLERS

    (gateway,) = [c for c in SYSTEM_CONTROLLERS if c.name == "istio ingress gateway"]
    assert gateway.pods == gateway_values(None, "internal")["autoscaling"]["maxReplicas"] == 10
    assert dict(gateway.requests) == GATEWAY_RESOURCES["requests"]


def test_only_an_eks_stack_exports_the_system_template(previews):
    from components.system_nodes import system_scheduling_template
    from platform_config.loader import parse_platform_config

    from .helpers import raw_stack

    dev_pools = previews["dev"].report["stackOutputs"]["nodePools"]
    assert dev_pools and all(p["name"] != "system" for p in dev_pools)  # kubeconfig mode: no system node group
    eks = parse_platform_config(raw_stack("prod")).cluster.eks
    assert eks is not None
    prod_group = eks.system_node_group
    (system,) = [p for p in previews["prod"].report["stackOutputs"]["nodePools"] if p["name"] == "system"]
    # Production's second replica of each part of the control plane is reserved on the system nodes.
    assert system == system_scheduling_template(prod_group, 2) != system_scheduling_template(prod_group, 1)
    assert system["maxSize"] == 12


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_every_stack_admits_and_schedules_every_pod_template(previews, stack):
    run_ = previews[stack]
    section = run_.report["admission"]
    assert not section["failed"], section["data"]["findings"]
    workloads = section["data"]["workloads"]
    # Only a pod the cluster's own scheduler places (no nodeSelector, no GPU, no known pool it
    # tolerates: the endpoint picker on an existing cluster) has no pool; on EKS every pod has one.
    outputs = run_.report["stackOutputs"]
    unchecked = {
        w.label
        for w in admit_and_schedule(run_.manifests(), outputs["nodePools"], outputs["serverPeaks"]).left_to_cluster_scheduler
    }
    assert stack == "dev" or unchecked == set()
    assert workloads and all(w["findings"] == [] and w["peakPods"] > 0 for w in workloads)
    assert all(
        (w["pool"] is None and w["placedPods"] == 0)
        if w["workload"] in unchecked
        else (w["pool"] and w["placedPods"] == w["peakPods"])
        for w in workloads
    )


def test_the_pickers_run_on_the_system_pool_on_eks(previews):
    workloads = previews["prod"].report["admission"]["data"]["workloads"]
    pickers = [w for w in workloads if w["workload"].endswith("-epp")]
    assert pickers and all(w["pool"] == "system" and w["placedPods"] == w["peakPods"] == 3 for w in pickers)


@dataclass(frozen=True)
class Stack:
    config: Any
    manifests: list[dict[str, Any]]
    outputs: dict[str, Any]


@pytest.fixture(scope="module")
def prod() -> Stack:
    from platform_config.loader import parse_platform_config

    from .helpers import Evaluated, raw_stack

    raw = copy.deepcopy(raw_stack("prod"))
    evaluated = Evaluated(raw, shared=True)
    return Stack(parse_platform_config(raw), evaluated.manifests(), evaluated.outputs)


def _kubernetes_pod_requests(spec: dict[str, Any]) -> dict[str, Decimal]:
    """A pod's requests as Kubernetes and Kueue total them (component-helpers v0.36.2 resource/helpers.go
    PodRequests: app containers and restartPolicy-Always init containers add up; a regular init container counts
    with the sidecars started before it; the larger total wins)."""
    from platform_config.quantity import parse_quantity

    def requests(container: dict[str, Any]) -> dict[str, Decimal]:
        return {k: Decimal(str(parse_quantity(v))) for k, v in container.get("resources", {}).get("requests", {}).items()}

    def add(a: dict[str, Decimal], b: dict[str, Decimal]) -> dict[str, Decimal]:
        return {k: a.get(k, Decimal(0)) + b.get(k, Decimal(0)) for k in {*a, *b}}

    total: dict[str, Decimal] = {}
    for container in spec["containers"]:
        total = add(total, requests(container))
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for container in spec.get("initContainers", []):
        if container.get("restartPolicy") == "Always":
            sidecars = add(sidecars, requests(container))
            total = add(total, requests(container))
        else:
            running = add(sidecars, requests(container))
            init_peak = {k: max(init_peak.get(k, Decimal(0)), running.get(k, Decimal(0))) for k in {*init_peak, *running}}
    return {k: max(total.get(k, Decimal(0)), init_peak.get(k, Decimal(0))) for k in {*total, *init_peak}}


def test_kueue_counts_a_batch_pod_as_the_cluster_does_its_sidecar_included(prod):
    """Kueue sums the Job's template, to which the injector adds nothing (it mutates pods): the template's own
    stub of the sidecar, merged into the injected one, makes what Kueue counts what the namespace's quotas and the
    scheduler count for the pod the admission stage builds, one sidecar and no stub left."""
    result = admit_and_schedule(prod.manifests, prod.outputs["nodePools"])
    jobs = [m for m in prod.manifests if m["kind"] == "Job" and m["metadata"]["namespace"] == "team-b"]
    assert jobs
    for job in jobs:
        (workload,) = [w for w in result.workloads if w.kind == "Job" and w.name == job["metadata"]["name"]]
        names = [c["name"] for c in workload.containers + workload.init_containers]
        assert names.count("istio-proxy") == 1 and workload.findings == []
        kueue = _kubernetes_pod_requests(job["spec"]["template"]["spec"])
        cluster = workload.pod_requests()
        assert (kueue["cpu"], kueue["memory"]) == (cluster["cpu"], cluster["memory"]), job["metadata"]["name"]
        # And the stub states what the injector sizes the sidecar from the pod's annotations alone: the same pod
        # without it gets a sidecar of the stub's requests.
        bare = copy.deepcopy(job)
        spec = bare["spec"]["template"]["spec"]
        (stub,) = [c for c in spec["initContainers"] if c["name"] == "istio-proxy"]
        spec["initContainers"].remove(stub)
        objects = [bare if m is job else m for m in prod.manifests]
        (alone,) = [
            w for w in admit_and_schedule(objects, prod.outputs["nodePools"]).workloads if w.name == job["metadata"]["name"]
        ]
        (sidecar,) = [c for c in alone.containers if c["name"] == "istio-proxy"]
        assert sidecar["resources"]["requests"] == stub["resources"]["requests"]


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_every_pod_template_the_program_renders_is_read_by_the_admission_stage_and_the_pack(previews, stack):
    """The kinds that make pods are listed by each reader (the admission stage here, the pack's
    kube.WORKLOAD_TYPES): every object the program renders with a pod template is one both read, so a backend
    that starts rendering another kind is caught here, not on a cluster."""
    import sys

    from .helpers import ROOT

    sys.path.insert(0, str(ROOT / "policies"))
    from inference_governance import kube

    run_ = previews[stack]
    admitted = {w["workload"] for w in run_.report["admission"]["data"]["workloads"]}
    templated = [m for m in run_.manifests() if isinstance(m.get("spec"), dict) and "template" in m["spec"]]
    assert templated
    for manifest in templated:
        kind, metadata = manifest["kind"], manifest["metadata"]
        group = manifest["apiVersion"].rpartition("/")[0]
        label = f"{'KnativeService' if group == 'serving.knative.dev' else kind} {metadata['namespace']}/{metadata['name']}"
        assert label in admitted, label
        token = f"kubernetes:{manifest['apiVersion']}:{kind}"
        assert kube.pod_template(token, manifest) is not None, token


def test_every_kind_a_backend_renders_with_pods_is_one_the_admission_stage_and_the_pack_read():
    """The workload kinds are listed three times: by the backends that render them (components/backends/), by the
    admission stage (WORKLOAD_KINDS) and by the pack (kube.WORKLOAD_TYPES). Every object with a pod template that a
    backend renders, for each server of every stack and the Knative labeller without a picker, is of a kind the
    stage reads, and every kind the stage reads is one the pack reads: a backend that starts rendering another kind
    fails here, before any stack renders it."""
    import sys

    from components.backends import BACKENDS
    from preview.admission import WORKLOAD_KINDS

    from .helpers import ROOT, prod_with_labeller_server, raw_stack, validate

    sys.path.insert(0, str(ROOT / "policies"))
    from inference_governance import kube

    rendered: dict[str, set[tuple[str, str]]] = {}
    for raw in (raw_stack("dev"), raw_stack("staging"), prod_with_labeller_server()):
        for model in validate(raw).models:
            backend = model.backend
            objects = [*backend.model_objects(model), *(o for s in model.servers for o in backend.server_objects(s))]
            for obj in objects:
                spec = obj.manifest.get("spec") or {}
                if obj.role == "pods" or "template" in spec or "jobTemplate" in spec:
                    rendered.setdefault(backend.mode, set()).add((obj.manifest["apiVersion"], obj.manifest["kind"]))
    assert set(rendered) == set(BACKENDS), "every backend renders pods in some stack"
    unread = [
        f"{kind} ({api_version})"
        for api_version, kind in sorted(set().union(*rendered.values()))
        if (api_version.rsplit("/", 1)[0] + "/", kind) not in WORKLOAD_KINDS
    ]
    assert unread == []
    pack_kinds = {(token.split(":")[1].rsplit("/", 1)[0] + "/", token.split(":")[2]) for token in kube.WORKLOAD_TYPES}
    assert set(WORKLOAD_KINDS) <= pack_kinds


def test_the_previews_other_readers_of_workload_kinds_follow_the_admission_stages():
    """The preview reads workload kinds in two more places, tied here to WORKLOAD_KINDS (and to the pack's
    kube.WORKLOAD_TYPES, which is wider): the first-up stage (preview/first_up.py, POD_TEMPLATE_KINDS and
    _pod_template) finds the pods of every kind the admission stage or the pack reads in the core API groups, and of a
    Knative Service; the diff (preview/diff.py ROLLING_KINDS) rolls the pods of every kind the stage reads when its
    template changes, but a Job's (its template cannot change: a replacement). A kind added to WORKLOAD_KINDS fails
    here until both know it."""
    import sys

    from preview.admission import WORKLOAD_KINDS
    from preview.diff import Change
    from preview.engine import RecordedResource
    from preview.first_up import created_objects

    from .helpers import ROOT

    sys.path.insert(0, str(ROOT / "policies"))
    from inference_governance import kube

    tokens = {f"kubernetes:{prefix}v1:{kind}" for prefix, kind in WORKLOAD_KINDS}
    assert tokens <= set(kube.WORKLOAD_TYPES)
    core = {token for token in kube.WORKLOAD_TYPES if token.split(":")[1].split("/")[0] in ("apps", "batch")}
    for token in sorted(tokens | core):
        _, api_version, kind = token.split(":")
        body: dict[str, Any] = {"metadata": {"labels": {"app": "x"}}}
        for key in reversed(kube.WORKLOAD_TYPES[token]):
            body = {key: body}
        manifest = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "w", "namespace": "t"}, **body}
        resource = RecordedResource(token, "w", f"urn:{token}", None, True, None, manifest)
        pods = [o for o in created_objects([resource]) if o.resource == "pods"]
        assert len(pods) == 1 and pods[0].labels.get("app") == "x", token
        rolls = Change(f"urn:{token}", token, "w", paths=["spec.template.spec.containers[0].image"]).rolls_pods
        assert rolls == (token in tokens and kind != "Job"), token
