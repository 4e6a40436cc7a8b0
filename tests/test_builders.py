"""Direct unit tests of the pure builders, on a plan resolved from the prod stack: the pod,
each backend's objects, routes and subsets, the gateway filter's config, tenant isolation."""

from __future__ import annotations

import copy
import dataclasses
import functools

import pytest

from components.backends import BACKENDS
from components.serving import Plan
from components.shapes import ServerPlan
from components.specs import gateway, pod, routes, tenancy

from .helpers import config_problems, prod_with_labeller_server, raw_stack, set_at, validate


@pytest.fixture(scope="module")
def plan() -> Plan:
    return validate(prod_with_labeller_server())


@functools.cache
def staging_plan() -> Plan:
    """Staging's: its labeller is the Knative model without an endpoint picker (it scales to zero)."""
    return validate(raw_stack("staging"))


def server(plan: Plan, model: str, version: str = "v1") -> ServerPlan:
    return next(s for s in plan.model(model).servers if s.version.name == version)


def test_the_pod_takes_its_shape_from_the_backend(plan):
    deployment_pod = pod.pod_spec(server(plan, "llama-70b"))
    knative_pod = pod.pod_spec(server(plan, "llama-8b"))
    vllm = deployment_pod["containers"][0]
    # The Deployment's pod drains itself: preStop, grace period, spread over nodes.
    assert vllm["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "15"]
    assert deployment_pod["terminationGracePeriodSeconds"] == 325 and deployment_pod["topologySpreadConstraints"]
    assert vllm["ports"][0]["name"] == "http" and vllm["readinessProbe"]["httpGet"]["port"] == "http"
    # Knative's queue-proxy drains; Knative refuses hooks and the grace period.
    knative_vllm = knative_pod["containers"][0]
    assert "lifecycle" not in knative_vllm and "terminationGracePeriodSeconds" not in knative_pod
    assert knative_vllm["ports"][0]["name"] == "http1" and knative_vllm["readinessProbe"]["httpGet"]["port"] == 8000


def test_vllm_arguments_come_from_the_plan(plan):
    args = pod.vllm_args(server(plan, "llama-70b"))
    # The weight mirror's copy of the pinned revision (prod streams its weights).
    copy = "s3://inference-prod-model-weights/serving/meta-llama/Llama-3.1-70B-Instruct/1605565b47bb9346c5515c34102e054115b4f98b/"
    assert args[:3] == [copy, "--served-model-name", "llama-3.1-70b-instruct"]
    assert args[args.index("--tensor-parallel-size") + 1] == "4"
    # The drain chain: vLLM drains as long as the longest request (standard's 300 s route).
    assert args[args.index("--shutdown-timeout") + 1] == "300"
    assert args[args.index("--scheduling-policy") + 1] == "priority"
    batch = pod.vllm_args(server(plan, "llama-8b-batch"))
    assert "--scheduling-policy" not in batch and batch[3] == "llama-3.1-8b-instruct"  # answers to the chat model too


def test_each_backend_declares_its_objects_in_order(plan):
    hpa = [(o.suffix, o.role, o.serves) for o in BACKENDS["hpa"].server_objects(server(plan, "llama-70b"))]
    assert hpa == [
        ("deployment", "pods", True),
        ("service", "plain", True),
        ("pdb", "plain", False),
        ("service-monitor", "monitor", False),
        ("hpa", "autoscaler", False),
        # The version's endpoint picker: its identity and config, the network and mesh rules
        # that let it reach the servers (the mesh rules after Istio's CRDs), the pool and
        # objectives it reads (after their CRDs), then its pods (after what pods wait for: the
        # injector above all, tests/test_first_up.py).
        ("epp-serviceaccount", "plain", False),
        ("epp-role", "plain", False),
        ("epp-rolebinding", "plain", False),
        ("epp-configmap", "plain", False),
        ("epp-envoy-configmap", "plain", False),
        ("epp-ingress-networkpolicy", "plain", False),
        ("epp-to-servers-networkpolicy", "plain", False),
        ("epp-servers-from-epp-networkpolicy", "plain", False),
        ("epp-to-servers-destinationrule", "mesh", False),
        ("inferencepool", "inference-pool", True),
        ("premium-inferenceobjective", "inference-pool", False),
        ("standard-inferenceobjective", "inference-pool", False),
        ("epp-service", "plain", True),
        ("epp-deployment", "pods", True),
        ("epp-poddisruptionbudget", "plain", False),
        ("epp-podmonitor", "monitor", False),
    ]
    kpa = [(o.suffix, o.role, o.serves) for o in BACKENDS["kpa"].server_objects(server(plan, "llama-8b"))]
    # A Knative version's own objects, the Service on queue-proxy's port its picker's sidecar routes by, then the
    # same picker objects in the same order (the 8B serves premium and standard, as the 70B does).
    assert kpa == [
        ("knative-service", "pods", True),
        ("pod-monitor", "monitor", False),
        ("pdb", "plain", False),
        ("queue-proxy-service", "plain", True),
        *hpa[5:],
    ]
    unpicked = [(o.suffix, o.role, o.serves) for o in BACKENDS["kpa"].server_objects(server(staging_plan(), "labeller"))]
    assert unpicked == [("knative-service", "pods", True), ("pod-monitor", "monitor", False), ("pdb", "plain", False)]
    assert [o.suffix for o in BACKENDS["hpa"].model_objects(plan.model("llama-70b"))] == ["service"]


def test_routes_send_each_tier_to_its_owner(plan):
    route = plan.model("llama-8b").route
    assert [(t.tier, t.owner.name, t.by_priority) for t in route.tiers] == [
        ("premium", "llama-8b", True),
        ("standard", "llama-8b", True),
        ("batch", "llama-8b-batch", False),
    ]
    service = routes.virtual_service(route)
    names = [r["name"] for r in service["spec"]["http"]]
    assert names[:2] == ["premium-override-v1", "premium-override-v2"] and "batch-to-llama-8b-batch" in names
    # The batch model's own subsets: the batch tier it takes for the chat model.
    assert [tier for tier, _ in plan.model("llama-8b-batch").route.subsets] == ["batch"]


def test_subsets_eject_only_model_servers(plan):
    # Behind an endpoint picker, a version's subsets are the picker's pods: its own answers (429
    # sheds, 503 with no ready replica) must not eject it; the picker itself skips sick servers.
    (rule,) = routes.destination_rules(plan.model("llama-70b").route)
    assert rule["metadata"]["name"] == "llama-70b-v1-epp"
    assert rule["spec"]["host"] == "llama-70b-v1-epp.serving.svc.cluster.local"
    assert all("outlierDetection" not in s["trafficPolicy"] for s in rule["spec"]["subsets"])
    # A backend whose subsets are its own servers gets them ejected when they fail (no backend of today's:
    # Deployments always sit behind pickers, Knative models without one behind Knative's local gateway).
    policy = plan.config.traffic.tiers["premium"]
    outliers = routes.tier_traffic_policy(policy, eject_hosts=True)["outlierDetection"]
    assert outliers["splitExternalLocalOriginErrors"] is True and outliers["consecutiveGatewayErrors"] == 5
    # Finding 10: unset, consecutive5xxErrors is 5 and ejects first; 0 leaves gateway errors in charge.
    assert outliers["consecutive5xxErrors"] == 0
    assert "outlierDetection" not in routes.tier_traffic_policy(policy, eject_hosts=False)
    # Knative models behind pickers have per-version rules too; one without (staging's labeller, scaled to zero)
    # is reached through Knative's local gateway, whose pods the shared rule's subsets are.
    assert routes.shared_destination_rules(plan.routes) == {}
    shared = routes.shared_destination_rules(staging_plan().routes)
    assert list(shared) == ["knative-tiers"]
    assert shared["knative-tiers"]["metadata"]["name"] == "knative-model-tiers"
    assert all("outlierDetection" not in s["trafficPolicy"] for s in shared["knative-tiers"]["spec"]["subsets"])


def test_a_backend_built_on_another_shares_its_rule():
    # A mode derived from Knative's puts its subsets on the same shared rule, declared once.
    class DerivedKnative(type(BACKENDS["kpa"])):  # type: ignore[misc]
        mode = "derived"

    plan = staging_plan()
    knative_routes = [r for r in plan.routes if r.backend is BACKENDS["kpa"]]
    derived = dataclasses.replace(knative_routes[0], backend=DerivedKnative())
    shared = routes.shared_destination_rules((*plan.routes, derived))
    assert list(shared) == ["knative-tiers"]
    subsets = [s["name"] for s in shared["knative-tiers"]["spec"]["subsets"]]
    assert len(subsets) == len(routes.shared_destination_rules(plan.routes)["knative-tiers"]["spec"]["subsets"]) + len(
        routes.shared_destination_rules((derived,))["knative-tiers"]["spec"]["subsets"]
    )


def test_the_filter_config_names_priority_tiers_per_model(plan):
    config = gateway.filter_config(plan.config.traffic, plan.routes)
    assert config["priorities"] == {"premium": 0, "standard": 1, "batch": 2}
    assert config["models"]["llama-3.1-8b-instruct"]["priority_tiers"] == {"premium": True, "standard": True}
    assert config["models"]["batch-labeller"]["priority_tiers"] == {}
    assert gateway.stream_idle_timeout_seconds(plan.config.traffic) == 630


def test_tenant_isolation_lets_in_what_the_backends_name(plan):
    tenant = plan.config.tenants[0]
    ingress = BACKENDS["kpa"].tenant_ingress()
    names = [p["metadata"]["name"] for p in tenancy.network_policies(tenant, ingress)]
    assert names[-1] == "allow-knative-system" and "allow-knative-system" not in [
        p["metadata"]["name"] for p in tenancy.network_policies(tenant, ())
    ]
    # The mesh lets in Knative's activator and autoscaler by service account, never the whole
    # knative-serving namespace.
    sources = [rule["from"][0]["source"] for rule in tenancy.authorization_policy(tenant, ingress)["spec"]["rules"]]
    assert [s["namespaces"] for s in sources if "namespaces" in s] == [[tenant.name]]
    assert {"principals": ["cluster.local/ns/knative-serving/sa/activator"]} in sources


def test_the_drain_chain_is_derived_from_the_tier_timeouts(plan):
    chain = server(plan, "llama-70b").drain
    assert chain.route_timeout_seconds == {"premium": 120, "standard": 300}
    assert chain.request_timeout_seconds == 300 and chain.shutdown_timeout_seconds == 300
    assert chain.grace_seconds == chain.pre_stop_seconds + chain.shutdown_timeout_seconds + 10
    # A configured grace longer than the chain needs stays, and vLLM drains for all of it.
    raw = copy.deepcopy(raw_stack("prod"))
    raw["models"][2]["tiers"] = ["premium"]  # code completion at premium only: 120 s at most
    short = server(validate(raw), "llama-1b").drain
    assert short.request_timeout_seconds == 120
    assert short.grace_seconds == 300 and short.shutdown_timeout_seconds == 300 - 15 - 10


def test_servers_take_the_tiers_that_reach_them():
    # llama-8b asks for every tier but sends batch to llama-8b-batch: its servers neither take
    # batch nor drain for it; the batch model's servers take batch only, so they do not schedule
    # by priority.
    raw = copy.deepcopy(raw_stack("prod"))
    chat_config = next(m for m in raw["models"] if m["name"] == "llama-8b")
    chat_config["tiers"] = ["premium", "standard", "batch"]
    plan = validate(raw)
    chat, batch = server(plan, "llama-8b"), server(plan, "llama-8b-batch")
    assert chat.tiers == ("premium", "standard") and chat.by_priority
    assert set(chat.drain.route_timeout_seconds) == {"premium", "standard"}
    assert chat.tiers == tuple(t for t, _ in plan.model("llama-8b").route.subsets)
    assert batch.tiers == ("batch",) and not batch.by_priority
    assert "--scheduling-policy" not in pod.vllm_args(batch)


def test_every_deployment_keeps_its_picker():
    # The picker's queue is the only one on this path timed per tier: no environment may turn it off.
    for environment in ("production", "staging", "development"):
        raw = copy.deepcopy(raw_stack("prod"))
        raw["environment"] = environment
        (index,) = [i for i, m in enumerate(raw["models"]) if m["name"] == "llama-70b"]
        set_at(raw, ("models", index, "endpointPicker"), {"enabled": False})
        (problem,) = config_problems(raw)
        assert problem.startswith(f"inference-platform:models[{index}].endpointPicker.enabled: "), problem
        assert "only vLLM's admission bounds the queue, in requests and never in time" in problem
    # A Knative model goes without one only to scale to zero, and not in production (staging's labeller does).
    raw = copy.deepcopy(raw_stack("staging"))
    (index,) = [i for i, m in enumerate(raw["models"]) if m["name"] == "labeller"]
    raw["models"][index]["autoscaling"]["minReplicas"] = 1
    (problem,) = config_problems(raw)
    assert problem.startswith(f"inference-platform:models[{index}].endpointPicker.enabled: every tier's wait is timed")
    server = validate(raw_stack("staging")).model("labeller").servers[0]
    assert server.endpoint_picker is None
    # Without its picker the labeller's vLLM bounds its own queue.
    args = pod.vllm_args(server)
    assert args[args.index("--max-num-queued-reqs") + 1] == str(11 * server.max_num_seqs)


def test_a_picker_failure_mode_is_refused_naming_why():
    raw = copy.deepcopy(raw_stack("prod"))
    # A tier given in the stack replaces the default: premium's required fields, then the key.
    premium = {"timeout": "120s", "maxPendingRequests": 64, "maxRequests": 512, "retryAttempts": 1, "vllmPriority": 0}
    raw.setdefault("traffic", {})["tiers"] = {"premium": {**premium, "endpointPickerFailure": "open"}}
    (problem,) = config_problems(raw)
    assert "traffic.tiers.premium" in problem and "'endpointPickerFailure' is no longer read" in problem
    assert "FULL_DUPLEX_STREAMED" in problem
