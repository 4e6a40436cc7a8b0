"""Every server of every prod model in one shape (arguments, resources, probes, hardening, autoscaling), and what
waits for what when Pulumi creates them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .helpers import Evaluated, raw_stack, split_module_value
from .serving_helpers import arg, container, ksvc, pod, prod_downloading_weights


@pytest.fixture(scope="module")
def prod() -> Evaluated:
    return split_module_value("tests/test_serving.py prod", prod_downloading_weights)


# --- every server of every prod model -------------------------------------------------------------

PROD_SERVERS = [
    ("llama-70b-v1", "serving", "hpa"),
    ("llama-8b-v1", "serving", "kpa"),
    ("llama-8b-v2", "serving", "kpa"),
    ("llama-1b-v1", "team-a", "hpa"),
    ("batch-labeller-v1", "team-b", "kpa"),
    ("llama-8b-batch-v1", "serving", "kpa"),
]


def server_object(prod: Evaluated, name: str, namespace: str, mode: str) -> dict:
    return prod.k8s("Deployment", name, namespace) if mode == "hpa" else ksvc(prod, name, namespace)


@pytest.mark.parametrize("name, namespace, mode", PROD_SERVERS)
def test_every_prod_server(prod, name, namespace, mode):
    obj = server_object(prod, name, namespace, mode)
    spec, vllm = pod(obj), container(obj)
    args = vllm["args"]
    # Arguments from the typed config.
    assert arg(args, "--served-model-name") and arg(args, "--revision") and arg(args, "--max-model-len")
    assert arg(args, "--port") == "8000" and int(arg(args, "--shutdown-timeout")) > 0
    # GPU limits equal to requests, CPU and memory requested.
    limits, requests = vllm["resources"]["limits"], vllm["resources"]["requests"]
    gpu = [r for r in limits if r.startswith("nvidia.com/")]
    assert len(gpu) == 1 and limits[gpu[0]] == requests[gpu[0]]
    assert "cpu" in requests and requests["memory"] == limits["memory"]
    assert spec["nodeSelector"]["inference.platform/pool"] and spec["tolerations"][0]["key"] == "nvidia.com/gpu"
    # Probes on /health; a startup probe of three times the expected weights and engine start
    # (at least 5 minutes), from the model's cold start on its pool.
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert vllm[probe]["httpGet"]["path"] == "/health"
    model = obj["metadata"]["labels"]["inference.platform/model"]
    cold = next(r for r in prod.outputs["coldStarts"] if r["model"] == model)
    budget = vllm["startupProbe"]["periodSeconds"] * vllm["startupProbe"]["failureThreshold"]
    assert budget >= max(300, 3 * (cold["weightsSeconds"] + cold["engineSeconds"])) and budget % 10 == 0
    # Hardening.
    assert spec["securityContext"]["runAsNonRoot"] is True and vllm["securityContext"]["readOnlyRootFilesystem"] is True
    assert vllm["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    if mode == "hpa":
        assert spec["terminationGracePeriodSeconds"] >= 300 and vllm["lifecycle"]["preStop"]
        assert prod.k8s("PodDisruptionBudget", name, namespace)
        hpa = prod.k8s("HorizontalPodAutoscaler", name, namespace)["spec"]
        assert hpa["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 300
        assert prod.k8s("ServiceMonitor", name, namespace)
    else:
        annotations = obj["spec"]["template"]["metadata"]["annotations"]
        assert annotations["autoscaling.knative.dev/class"] == "kpa.autoscaling.knative.dev"
        assert int(annotations["autoscaling.knative.dev/max-scale"]) >= int(annotations["autoscaling.knative.dev/min-scale"])
        assert spec["containerConcurrency"] == 0 and spec["timeoutSeconds"] > 0
        # Behind the version's endpoint picker (production's rule), which dials queue-proxy's port.
        pool = prod.k8s("InferencePool", name, namespace)["spec"]
        # The version's current revision, which Knative labels with its name.
        revision = obj["spec"]["template"]["metadata"]["name"]
        assert pool["selector"]["matchLabels"] == {"serving.knative.dev/revision": revision}
        assert pool["targetPorts"] == [{"number": 8012}]
        assert prod.k8s("PodMonitor", name, namespace)


def test_hpa_owns_the_replica_count(prod):
    (record,) = [r for r in prod.records if r.name == "llama-70b-v1-deployment"]
    assert record.ignore_changes == ["spec.replicas"]


def test_disk_for_the_caches_is_requested(prod):
    requests = container(prod.k8s("Deployment", "llama-70b-v1", "serving"))["resources"]["requests"]
    assert requests["ephemeral-storage"] == "230Gi"  # 200Gi weights cache + 30Gi scratch


def test_sidecar_exits_once_drained(prod):
    annotations = prod.k8s("Deployment", "llama-70b-v1", "serving")["spec"]["template"]["metadata"]["annotations"]
    proxy = json.loads(annotations["proxy.istio.io/config"])
    assert (
        proxy["proxyMetadata"] == {"EXIT_ON_ZERO_ACTIVE_CONNECTIONS": "true"} and proxy["holdApplicationUntilProxyStarts"] is True
    )


def test_knative_services_get_a_disruption_budget(prod):
    pdb = prod.k8s("PodDisruptionBudget", "llama-8b-v1", "serving")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": {"serving.knative.dev/service": "llama-8b-v1"}}}


# --- what waits for what ----------------------------------------------------------------------


def _dependencies(evaluated: Evaluated, token: str, name: str) -> set[str]:
    """The names of the resources the engine is told this one depends on."""
    (record,) = [r for r in evaluated.records if r.type == token and r.name == name]
    by_urn = {r.urn: r.name for r in evaluated.records}
    return {by_urn[urn] for urn in record.dependencies}


def _tenant_children(evaluated: Evaluated, tenant: str, token: str) -> set[str]:
    return {r.name for r in evaluated.records if r.type == token and r.parent and r.parent.endswith(f"Tenant::{tenant}")}


def test_pods_wait_for_their_tenants_admission_and_isolation(prod):
    for token, name in (
        ("kubernetes:apps/v1:Deployment", "llama-70b-v1-deployment"),
        ("kubernetes:serving.knative.dev/v1:Service", "llama-8b-v2-knative-service"),
    ):
        (record,) = [r for r in prod.resources if r["type"] == token and r["name"] == name]
        tenant = record["inputs"]["metadata"]["namespace"]
        quotas = _tenant_children(prod, tenant, "kubernetes:core/v1:ResourceQuota")
        (limits,) = _tenant_children(prod, tenant, "kubernetes:core/v1:LimitRange")
        policies = _tenant_children(prod, tenant, "kubernetes:networking.k8s.io/v1:NetworkPolicy")
        deny = f"{tenant}-default-deny-ingress"
        # What a starting server may reach (the deny, DNS, istiod, its downloads) is in place first.
        egress = {p for p in policies if p.endswith("-egress")}
        assert len(quotas) == 4 and deny in policies and f"{tenant}-allow-dns-egress" in egress
        needs = _dependencies(prod, token, name)
        mesh = {f"{tenant}-peer-authentication", f"{tenant}-authorization-policy"}
        assert {tenant, *quotas, limits, deny, *egress, *mesh} <= needs, (name, needs)
        # Policies that only allow traffic in are no reason to hold pods back.
        assert not (policies - {deny} - egress) & needs
        # Sidecar injection and the PriorityClasses before any pod; Knative before a Knative Service.
        assert {"mesh-istiod", "inference-production", "inference-experiment"} <= needs
        assert ("knative-serving-serving" in needs) == (token == "kubernetes:serving.knative.dev/v1:Service")


def test_objects_without_pods_wait_only_for_what_they_need(prod):
    assert _dependencies(prod, "kubernetes:policy/v1:PodDisruptionBudget", "llama-70b-v1-pdb") == {"serving"}
    assert _dependencies(prod, "kubernetes:core/v1:Service", "llama-70b-v1-service") == {"serving"}
    # Monitors are Prometheus Operator CRDs; the HPA's metrics come from prometheus-adapter.
    monitor = _dependencies(prod, "kubernetes:monitoring.coreos.com/v1:ServiceMonitor", "llama-70b-v1-service-monitor")
    assert monitor == {"serving", "monitoring-release"}
    pod_monitor = _dependencies(prod, "kubernetes:monitoring.coreos.com/v1:PodMonitor", "llama-8b-v1-pod-monitor")
    assert pod_monitor == {"serving", "monitoring-release"}
    hpa = _dependencies(prod, "kubernetes:autoscaling/v2:HorizontalPodAutoscaler", "llama-70b-v1-hpa")
    assert hpa == {"llama-70b-v1-deployment", "prometheus-adapter-release"}


def test_routes_wait_for_the_endpoints_they_send_traffic_to(prod):
    needs = _dependencies(prod, "kubernetes:networking.istio.io/v1:VirtualService", "llama-8b-route-virtual-service")
    assert {"llama-8b-v1-knative-service", "llama-8b-v2-knative-service", "gateway-routing-gateway"} <= needs, needs
    # An HPA version is routed to once its Deployment has rolled out, not on its first ready pod.
    needs = _dependencies(prod, "kubernetes:networking.istio.io/v1:VirtualService", "llama-70b-route-virtual-service")
    assert {"llama-70b-v1-deployment", "llama-70b-v1-service", "llama-70b-service"} <= needs, needs


def test_a_knative_versions_picker_picks_from_its_current_revision_once_it_is_ready(prod):
    """Knative routes to a version's latest ready revision; the picker does not go through Knative's route, and an
    older revision's pods carry the same labels until Knative scales it away, which the picker's own traffic would
    prevent. So a picked version names its revision (knative-v1.23.0 pkg/apis/serving/v1/revision_validation.go: the
    service's name as prefix, a new name for a changed template), and its pool and queue-proxy Service select that
    revision's pods (the label Knative puts on them, pkg/apis/serving/register.go RevisionLabelKey), moving only once
    `pulumi up` has seen the new revision ready."""
    import copy

    from components.backends.knative import knative_service

    from .helpers import validate

    service = ksvc(prod, "llama-8b-v1", "serving")
    revision = service["spec"]["template"]["metadata"]["name"]
    assert re.fullmatch(r"llama-8b-v1-[0-9a-f]{10}", revision)
    pool = prod.k8s("InferencePool", "llama-8b-v1", "serving")["spec"]
    assert pool["selector"]["matchLabels"] == {"serving.knative.dev/revision": revision}
    assert prod.k8s("Service", "llama-8b-v1-queue-proxy", "serving")["spec"]["selector"] == {
        "serving.knative.dev/revision": revision
    }
    # The picker still reaches every revision's pods (its network rules), so requests it sent an older one finish.
    egress = prod.k8s("NetworkPolicy", "llama-8b-v1-epp-to-servers", "serving")["spec"]["egress"][0]["to"][0]
    assert egress["podSelector"]["matchLabels"] == {"app.kubernetes.io/instance": "llama-8b-v1"}
    for name in ("llama-8b-v1-inferencepool", "llama-8b-v1-queue-proxy-service"):
        token = next(r.type for r in prod.records if r.name == name)
        assert "llama-8b-v1-knative-service" in _dependencies(prod, token, name), name

    # The same template names the same revision; any change to it, a new one.
    def named(raw: dict) -> str:
        server = next(s for m in validate(raw).models for s in m.servers if s.name == "llama-8b-v1")
        return knative_service(server)["spec"]["template"]["metadata"]["name"]

    raw = copy.deepcopy(raw_stack("prod"))
    before = named(raw)
    assert named(copy.deepcopy(raw)) == before
    raw["models"][1]["autoscaling"]["kpa"]["scaleDownDelay"] = "6m"
    assert named(raw) != before and named(raw).startswith("llama-8b-v1-")
    # Without a picker Knative names its revisions itself (staging's labeller).
    labeller = Evaluated(raw_stack("staging"), shared=True).k8s("Service", "labeller-v1", "team-a")
    assert "name" not in labeller["spec"]["template"]["metadata"]


def test_pulumi_up_waits_for_each_version_to_load_its_model(prod):
    """Pulumi's default wait (10 minutes for a Deployment) is shorter than loading a 70B model:
    the engine is told to wait past Kubernetes' own progress deadline, and to await the Knative
    Services' Ready condition, which it would not check at all otherwise."""
    deployment = prod.k8s("Deployment", "llama-70b-v1", "serving")
    deadline = deployment["spec"]["progressDeadlineSeconds"]
    assert deadline > 600
    (record,) = [r for r in prod.records if r.name == "llama-70b-v1-deployment"]
    assert record.custom_timeouts == {"create": f"{deadline + 60}s", "update": f"{deadline + 60}s"}
    stable = ksvc(prod, "llama-8b-v1", "serving")
    assert stable["metadata"]["annotations"]["pulumi.com/waitFor"] == "condition=Ready"
    knative_deadline = int(
        stable["spec"]["template"]["metadata"]["annotations"]["serving.knative.dev/progress-deadline"].rstrip("s")
    )
    (record,) = [r for r in prod.records if r.name == "llama-8b-v1-knative-service"]
    assert record.custom_timeouts == {"create": f"{knative_deadline + 60}s", "update": f"{knative_deadline + 60}s"}


def test_without_the_activator_the_mesh_balances_knative_replicas_by_least_requests():
    """A Knative model without an endpoint picker (staging's labeller, which scales to zero): with no burst capacity
    (components/backends/knative.py TARGET_BURST_CAPACITY) Knative's local gateway, an Istio gateway, sends to the
    ready replicas itself: by Istio's default load balancer, which is least requests (istio/istio 1.30.3
    pilot/pkg/networking/core/cluster_traffic_policy.go), and the platform's DestinationRules on that gateway set
    none."""
    from components.backends.knative import KNATIVE_LOCAL_GATEWAY, TARGET_BURST_CAPACITY

    from .helpers import mirror_show

    source = mirror_show(Path("istio+istio"), "1.30.3", "pilot/pkg/networking/core/cluster_traffic_policy.go")
    assert "func defaultLBAlgorithm() cluster.Cluster_LbPolicy {\n\treturn cluster.Cluster_LEAST_REQUEST\n}" in source
    assert TARGET_BURST_CAPACITY == 0
    evaluated = Evaluated(raw_stack("staging"), shared=True)
    rules = [m for m in evaluated.manifests() if m["kind"] == "DestinationRule" and m["spec"]["host"] == KNATIVE_LOCAL_GATEWAY]
    assert [s["name"] for r in rules for s in r["spec"]["subsets"]] == ["labeller-v1-batch"]
    for rule in rules:
        assert "loadBalancer" not in rule["spec"].get("trafficPolicy", {}), rule["metadata"]["name"]
        assert all("loadBalancer" not in s.get("trafficPolicy", {}) for s in rule["spec"]["subsets"])
