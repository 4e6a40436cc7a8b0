"""The llm-d router's endpoint picker in front of one model version: every object passes the
upstream schemas, Pod Security restricted, our admission model and the pack's pod rules; the
EPP's config and flags use only what llm-d-router v0.10.0 defines (held against its source when
the mirror is present); bands, TTL, timeouts, objectives and network rules are what the plan
says; the pod is in the mesh and nothing relaxes mTLS (the Istio facts it rests on held against
Istio 1.30.3's source when that mirror is present)."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import yaml

from components.constants import GATEWAY_SELECTOR, ISTIO_INGRESS_NAMESPACE, MONITORING_NAMESPACE, SYSTEM_NODE_SELECTOR
from components.picker_plan import EndpointPickerPlan, PickerBand
from components.specs import endpoint_picker as epp
from components.specs import pod as server_pod
from components.specs import pod_parts
from components.specs.network import NAMESPACE_NAME_LABEL
from platform_config import pins
from platform_config.serving import MESH_PROXY_RESOURCES
from preview.admission import istio_injects

from .helpers import ROOT, mirror_show, schema_validator

SERVER_LABELS = {"inference.platform/model": "llama-8b", "inference.platform/model-version": "v1"}
MIRROR = Path("llm-d+llm-d-router")  # read in ../shared/upstream-sources
TAG = "v0.10.0"
ISTIO_MIRROR = Path("istio+istio")  # read in ../shared/upstream-sources
ISTIO_TAG = "1.30.3"
SERVER_HOST = "llama-8b.team-a.svc.cluster.local"


def make_plan(**changes: Any) -> EndpointPickerPlan:
    plan = EndpointPickerPlan(
        name="llama-8b-v1",
        namespace="team-a",
        server_labels=dict(SERVER_LABELS),
        server_host=SERVER_HOST,
        target_port=8000,
        replicas=2,
        # Deliberately out of order: the builders sort.
        bands=(
            PickerBand("standard", 10, 500, "256Mi", 10),
            PickerBand("batch", -1, 100, "128Mi", 30),
            PickerBand("premium", 100, 1000, "512Mi", 5),
        ),
        request_timeout_seconds=600,
        # The model's standard labels, one of which also selects its servers.
        labels={
            "app.kubernetes.io/name": "llama-8b",
            "app.kubernetes.io/part-of": "inference-platform",
            "inference.platform/model": "llama-8b",
        },
        node_selector={"inference.platform/pool": "system"},
    )
    return dataclasses.replace(plan, **changes)


@pytest.fixture(scope="module")
def plan() -> EndpointPickerPlan:
    return make_plan()


@pytest.fixture(scope="module")
def objects(plan) -> list[dict[str, Any]]:
    return epp.endpoint_picker_objects(plan)


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return found


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return one(objects, "Deployment")["spec"]["template"]["spec"]


def container(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (found,) = [c for c in pod_spec(objects)["containers"] if c["name"] == name]
    return found


def git_show(path: str, mirror: Path = MIRROR, tag: str = TAG) -> str:
    return mirror_show(mirror, tag, path)


def istio_show(path: str) -> str:
    return git_show(path, ISTIO_MIRROR, ISTIO_TAG)


# --- schemas ----------------------------------------------------------------------------------


def test_every_object_validates_against_upstream_schemas(objects):
    results = schema_validator().validate_all(objects)
    assert [(r.label, r.errors) for r in results if r.status != "valid"] == []
    by_kind = {r.kind: r.schema for r in results}
    for kind in ("InferencePool", "InferenceObjective", "PodMonitor", "DestinationRule"):
        assert by_kind[kind].startswith("CRD schema"), kind
    for kind in ("Deployment", "Service", "NetworkPolicy", "Role", "ConfigMap", "PodDisruptionBudget"):
        assert by_kind[kind].startswith("kubernetes-validate"), kind


def test_a_broken_object_is_caught_by_the_same_validation(objects):
    pool = one(objects, "InferencePool")
    broken = {
        **pool,
        "spec": {**pool["spec"], "endpointPickerRef": {**pool["spec"]["endpointPickerRef"], "failureMode": "FailClosed"}},
    }
    assert schema_validator().validate(broken).status == "invalid"


def test_objects_come_in_apply_order_and_every_one_is_labelled(objects, plan):
    kinds = [o["kind"] for o in objects]
    assert kinds.index("ServiceAccount") < kinds.index("Role") < kinds.index("RoleBinding") < kinds.index("Deployment")
    assert kinds.index("InferencePool") < kinds.index("InferenceObjective") < kinds.index("Deployment")
    # Envoy's first request to a server leaves with the DestinationRule already in place.
    assert kinds.index("DestinationRule") < kinds.index("Deployment")
    assert kinds.index("ConfigMap") < kinds.index("Deployment") and kinds[-1] == "PodMonitor"
    for obj in objects:
        assert obj["metadata"]["namespace"] == plan.namespace
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "inference-platform"
        assert obj["metadata"]["labels"]["app.kubernetes.io/component"] == "endpoint-picker"
        # No part shared between objects or within one (it would be written as a YAML anchor).
        assert "&id" not in yaml.safe_dump(obj)


# --- the EPP config ---------------------------------------------------------------------------


def config_paths(document: Any, where: str = "") -> list[tuple[str, str]]:
    """(place, key) for every key of the document, places named as in EPP_CONFIG_FIELDS;
    plugin parameters are returned under `plugins[<type>].parameters`."""
    found: list[tuple[str, str]] = []
    if isinstance(document, dict):
        for key, value in document.items():
            found.append((where, key))
            if where == "plugins[]" and key == "parameters":
                found += [(f"plugins[{document['type']}].parameters", k) for k in value]
                continue
            found += config_paths(value, f"{where}.{key}".lstrip("."))
    elif isinstance(document, list):
        for item in document:
            found += config_paths(item, f"{where}[]")
    return found


def unknown_fields(config: dict[str, Any]) -> list[tuple[str, str]]:
    """Keys of the config that the upstream tables do not define at their place."""
    unknown = []
    for place, key in config_paths(config):
        if place.startswith("plugins[") and place.endswith(".parameters"):
            plugin_type = place[len("plugins[") : -len("].parameters")]
            known = epp.EPP_PLUGINS[plugin_type][1] if plugin_type in epp.EPP_PLUGINS else frozenset()
        elif place == "featureGates[]":
            continue
        else:
            known = epp.EPP_CONFIG_FIELDS[place][2] if place in epp.EPP_CONFIG_FIELDS else frozenset()
        if key not in known:
            unknown.append((place, key))
    return unknown


def test_the_config_uses_only_fields_upstream_defines(plan):
    config = epp.endpoint_picker_config(plan)
    assert unknown_fields(config) == []
    assert {p["type"] for p in config["plugins"]} <= set(epp.EPP_PLUGINS)
    # The config the ConfigMap carries is this one.
    config_map = epp.epp_config_map(plan)
    assert yaml.safe_load(config_map["data"][epp.EPP_CONFIG_FILE]) == config


def test_a_misspelt_field_would_be_caught(plan):
    config = epp.endpoint_picker_config(plan)
    config["flowControl"]["priorityBands"][0]["maxRequest"] = "1"
    config["plugins"][-1]["parameters"]["queueDepth"] = 3
    config["flowControl"]["ttl"] = "1s"
    assert sorted(unknown_fields(config)) == [
        ("flowControl", "ttl"),
        ("flowControl.priorityBands[]", "maxRequest"),
        ("plugins[utilization-detector].parameters", "queueDepth"),
    ]


def go_struct_json_tags(source: str, struct: str) -> set[str]:
    body = re.search(rf"^type {struct} struct \{{(.*?)^\}}", source, re.S | re.M)
    assert body, struct
    return {name for name in re.findall(r'json:"([^",]*)', body.group(1)) if name}


def test_the_field_table_is_upstreams(plan):
    source = git_show(epp.CONFIG_TYPES)
    for place, (struct, path, fields) in epp.EPP_CONFIG_FIELDS.items():
        assert path == epp.CONFIG_TYPES
        tags = go_struct_json_tags(source, struct)
        if struct == "EndpointPickerConfig":
            tags |= {"apiVersion", "kind"}  # metav1.TypeMeta, inline
        assert tags == set(fields), (place, struct, tags ^ set(fields))
    # The group and version the config declares.
    register = git_show("apix/config/v1alpha1/zz_generated.register.go")
    assert 'GroupName = "llm-d.ai"' in register
    assert epp.endpoint_picker_config(plan)["apiVersion"] == "llm-d.ai/v1alpha1"


def test_plugin_types_parameters_and_the_gate_are_upstreams():
    for plugin_type, (paths, parameters) in epp.EPP_PLUGINS.items():
        source = "".join(git_show(path) for path in paths)
        assert f'"{plugin_type}"' in source, (plugin_type, paths)
        for parameter in parameters:
            assert f'json:"{parameter}' in source, (plugin_type, parameter)
    assert f'FeatureGate = "{epp.FLOW_CONTROL_GATE}"' in git_show("pkg/epp/flowcontrol/config.go")
    chart_config = git_show("config/charts/routerlib/templates/_config.yaml")
    for ref, weight in epp.SCORER_WEIGHTS:
        assert re.search(rf"pluginRef: {ref}\n\s+weight: {weight}\n", chart_config), ref


def test_bands_are_sorted_with_their_caps_and_the_global_caps_are_their_sums(plan):
    flow = epp.endpoint_picker_config(plan)["flowControl"]
    assert epp.endpoint_picker_config(plan)["featureGates"] == ["flowControl"]
    assert [b["priority"] for b in flow["priorityBands"]] == [100, 10, -1]
    assert flow["priorityBands"][0] == {"priority": 100, "maxBytes": "512Mi", "maxRequests": "1000"}
    assert flow["maxBytes"] == "896Mi" and flow["maxRequests"] == "1600"
    assert flow["saturationDetector"] == {"pluginRef": "utilization-detector"}
    # Sheddable traffic: other negative priorities get the batch band's caps; unlisted ones the smallest.
    assert flow["defaultNegativePriorityBand"] == {"priority": -1, "maxBytes": "128Mi", "maxRequests": "100"}
    assert flow["defaultPriorityBand"]["maxRequests"] == "100"
    without_batch = make_plan(bands=tuple(b for b in plan.bands if b.tier != "batch"))
    assert "defaultNegativePriorityBand" not in epp.endpoint_picker_config(without_batch)["flowControl"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"bands": (PickerBand("premium", 10, 1, "1Mi", 5), PickerBand("standard", 10, 1, "1Mi", 5))}, "priorities"),
        ({"bands": (PickerBand("premium", 1, 1, "1Mi", 5), PickerBand("batch", 5, 1, "1Mi", 5))}, "must fall"),
        ({"bands": (PickerBand("gold", 1, 1, "1Mi", 5),)}, "tier 'gold'"),
        ({"bands": (PickerBand("premium", 1, 0, "1Mi", 5),)}, "max_requests"),
        ({"bands": (PickerBand("premium", 1, 1, "3Gi", 5),)}, "half the EPP's memory limit"),
        ({"bands": (PickerBand("premium", 1, 1, "lots", 5),)}, "not a Kubernetes quantity"),
        ({"bands": (PickerBand("premium", 1, 1, "1Mi", 0),)}, r"bands\[premium\].queue_seconds 0"),
        ({"bands": ()}, "at least one"),
        ({"replicas": 0}, "replicas"),
        ({"name": "x" * 41}, "40 characters"),
        ({"server_labels": {}}, "selector"),
        ({"server_host": "llama-8b.team-b.svc.cluster.local"}, "server_host"),
        ({"server_host": "llama-8b"}, "server_host"),
    ],
)
def test_plans_the_epp_would_refuse_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        epp.endpoint_picker_objects(make_plan(**changes))


# --- TTL and timeouts -------------------------------------------------------------------------


def test_queue_ttl_route_timeout_and_shutdown_cover_the_longest_request(objects, plan):
    # The EPP's one TTL is the longest band's (batch, 30 s); each tier's own is timed by the proxy.
    assert epp.endpoint_picker_config(plan)["flowControl"]["defaultRequestTTL"] == "30s"
    envoy = yaml.safe_load(one(objects, "ConfigMap", "llama-8b-v1-epp-envoy")["data"]["envoy.yaml"])
    assert envoy == epp.proxy_config(plan)
    (listener,) = [l for l in envoy["static_resources"]["listeners"] if l["name"] == "vllm"]
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    routes = {r["name"]: r for r in manager["route_config"]["virtual_hosts"][0]["routes"]}
    forwarding = {name: r["route"] for name, r in routes.items() if "route" in r}
    assert forwarding and all(r["timeout"] == "630s" for r in forwarding.values())
    # A request on its way to a server may be silent the whole route timeout; one still queued
    # only its tier's bound (two idle periods: see test_picker_proxy_in_envoy).
    idle = {name: r["idle_timeout"] for name, r in forwarding.items()}
    assert idle == {
        "picked": "630s",
        "premium-queued": "2.5s",
        "standard-queued": "5s",
        "batch-queued": "15s",
    }
    filters = {f["name"]: f["typed_config"] for f in manager["http_filters"]}
    ext_proc = filters["envoy.filters.http.ext_proc"]
    assert "message_timeout" not in ext_proc
    spec = pod_spec(objects)
    pre_stop = container(objects, "envoy-proxy")["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pre_stop >= 630 + epp.DRAIN_SECONDS
    assert spec["terminationGracePeriodSeconds"] > pre_stop
    assert "--drain-timeout=30s" in container(objects, "epp")["args"]


def test_envoy_routes_only_where_the_epp_says(objects, plan):
    envoy = epp.proxy_config(plan)
    (listener,) = [l for l in envoy["static_resources"]["listeners"] if l["name"] == "vllm"]
    assert listener["address"]["socket_address"] == {"address": "0.0.0.0", "port_value": 8081}
    filters = listener["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"]
    names = [f["name"] for f in filters]
    # A client's destination header is removed, and the route chosen again, before ext_proc; an
    # EPP that cannot be asked fails the request (refused: test_picker_proxy_in_envoy).
    assert names == ["envoy.filters.http.lua", "envoy.filters.http.ext_proc", "envoy.filters.http.router"]
    arrival = filters[0]["typed_config"]["default_source_code"]["inline_string"]
    assert 'remove("x-gateway-destination-endpoint")' in arrival and "clearRouteCache()" in arrival
    assert filters[1]["typed_config"]["failure_mode_allow"] is False
    assert filters[1]["typed_config"]["grpc_service"]["envoy_grpc"]["cluster_name"] == "ext_proc"
    clusters = {c["name"]: c for c in envoy["static_resources"]["clusters"]}
    original = clusters["original_destination_cluster"]
    assert original["type"] == "ORIGINAL_DST"
    assert original["original_dst_lb_config"] == {"use_http_header": True, "http_header_name": "x-gateway-destination-endpoint"}
    endpoint = clusters["ext_proc"]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    assert endpoint["address"]["socket_address"] == {"address": "127.0.0.1", "port_value": 9002}
    ready = [l for l in envoy["static_resources"]["listeners"] if l["name"] != "vllm"]
    assert ready[0]["address"]["socket_address"]["port_value"] == 19001


def test_the_preset_we_start_from_is_the_charts():
    values = yaml.safe_load(git_show("config/charts/llm-d-router-standalone/values.yaml"))
    envoy = values["router"]["proxy"]["presets"]["envoy"]
    # The preset's repository; its tag (1.33.2) deliberately replaced by the gateway's Envoy release,
    # which the tests can run (platform_config/pins.py ENVOY_PROXY).
    repository, _, preset_tag = envoy["image"].rpartition(":")
    assert repository == pins.ENVOY_PROXY.repository and preset_tag == "distroless-v1.33.2"
    assert pins.ENVOY_PROXY.tag == f"distroless-v{pins.ENVOY.version}"
    assert envoy["name"] == epp.PROXY_CONTAINER
    assert {"name": "http", "port": 8081, "protocol": "TCP", "targetPort": 8081} in values["router"]["extraServicePorts"]
    text = envoy["configMap"]["data"]["envoy.yaml"]
    for fragment in (
        "port_value: 8081",
        "port_value: 19001",
        "http_header_name: x-gateway-destination-endpoint",
        "authority: localhost:9002",
    ):
        assert fragment in text, fragment
    push = git_show("hack/push-chart.sh")
    assert "IMAGE_REGISTRY=${IMAGE_REGISTRY:-ghcr.io/llm-d}" in push
    assert "EPP_RELEASE_IMAGE_REPOSITORY=${EPP_RELEASE_IMAGE_REPOSITORY:-llm-d-router-endpoint-picker}" in push
    assert pins.ENDPOINT_PICKER.image == f"ghcr.io/llm-d/llm-d-router-endpoint-picker:v{pins.LLM_D_ROUTER_VERSION}"


# --- the pool and its objectives --------------------------------------------------------------


def test_pool_and_objectives_name_each_other(objects, plan):
    pool = one(objects, "InferencePool")
    assert pool["metadata"]["name"] == plan.name
    assert pool["spec"]["selector"] == {"matchLabels": SERVER_LABELS}
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    assert pool["spec"]["endpointPickerRef"] == {"name": "llama-8b-v1-epp", "port": {"number": 9002}, "failureMode": "FailClose"}
    objectives = [o for o in objects if o["kind"] == "InferenceObjective"]
    assert [(o["metadata"]["name"], o["spec"]["priority"]) for o in objectives] == [
        ("llama-8b-v1-premium", 100),
        ("llama-8b-v1-standard", 10),
        ("llama-8b-v1-batch", -1),
    ]
    assert all(o["spec"]["poolRef"] == {"group": "inference.networking.k8s.io", "name": plan.name} for o in objectives)
    assert epp.objective_name(plan, "premium") == "llama-8b-v1-premium"
    assert epp.epp_host_of(plan.name, plan.namespace) == "llama-8b-v1-epp.team-a.svc.cluster.local"
    args = container(objects, "epp")["args"]
    assert {"--pool-name=llama-8b-v1", "--pool-namespace=team-a", "--pool-group=inference.networking.k8s.io"} <= set(args)


def test_the_service_exposes_the_proxy_the_ext_proc_and_metrics_ports(objects, plan):
    service = one(objects, "Service")
    assert service["metadata"]["name"] == "llama-8b-v1-epp"
    assert service["spec"]["selector"] == epp.epp_selector(plan)
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert ports["http"]["port"] == epp.EPP_PROXY_PORT == 8081
    assert ports["grpc-ext-proc"] == {
        "name": "grpc-ext-proc",
        "protocol": "TCP",
        "port": 9002,
        "appProtocol": "kubernetes.io/h2c",
    }
    assert ports["http-metrics"]["port"] == epp.EPP_METRICS_PORT == 9090


# --- the Deployment ---------------------------------------------------------------------------


def flag_names(args: list[str]) -> list[str]:
    return [arg.split("=", 1)[0].removeprefix("--") for arg in args if arg.startswith("--")]


def test_every_flag_once_and_each_one_upstreams(objects):
    names = flag_names(container(objects, "epp")["args"])
    assert len(names) == len(set(names))
    assert set(names) == set(epp.EPP_FLAGS)
    args = container(objects, "epp")["args"]
    for wanted in (
        "--ha-enable-leader-election=false",
        "--metrics-endpoint-auth=false",
        "--health-checking=true",
        "--grpc-health-port=9003",
    ):
        assert wanted in args
    assert "--config-file=/config/config.yaml" in args


def test_the_flag_table_is_upstreams():
    sources = {path: git_show(path) for path in set(epp.EPP_FLAGS.values())}
    for flag, path in epp.EPP_FLAGS.items():
        if flag.startswith("zap-"):
            # controller-runtime's zap flags, bound through BindFlags.
            assert "ZapOptions.BindFlags" in sources[path]
        else:
            assert re.search(rf'Var\(&opts\.\w+, "{flag}"', sources[path]), flag


def test_the_pod_never_looks_like_a_server(objects, plan):
    template = one(objects, "Deployment")["spec"]["template"]
    labels = template["metadata"]["labels"]
    assert labels["llm-d-router-gateway"] == "llama-8b-v1-epp"
    # The model's label, which its Service selects, is not on EPP pods.
    assert not any(labels.get(k) == v for k, v in SERVER_LABELS.items())
    assert one(objects, "Deployment")["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_two_replicas_roll_and_spread_one_replica_does_not_spread(objects, plan):
    spec = one(objects, "Deployment")["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    spread = spec["template"]["spec"]["topologySpreadConstraints"]
    assert spread[0]["topologyKey"] == "kubernetes.io/hostname" and spread[0]["whenUnsatisfiable"] == "DoNotSchedule"
    assert all(c["labelSelector"] == {"matchLabels": epp.epp_selector(plan)} for c in spread)
    single = epp.deployment(make_plan(replicas=1))["spec"]["template"]["spec"]
    assert "topologySpreadConstraints" not in single
    assert "priorityClassName" not in spec["template"]["spec"]  # never preempts the system nodes' controllers


def test_images_are_the_pins_and_resources_the_table(objects):
    assert container(objects, "epp")["image"] == pins.ENDPOINT_PICKER.image
    assert container(objects, "envoy-proxy")["image"] == pins.ENVOY_PROXY.image
    assert pins.ENDPOINT_PICKER in pins.IMAGES and pins.ENVOY_PROXY in pins.IMAGES
    for name, table in epp.EPP_POD_RESOURCES.items():
        resources = container(objects, name)["resources"]
        flat = {f"{kind}.{resource}": value for kind, values in resources.items() for resource, value in values.items()}
        assert flat == table
        assert "limits.memory" in table and "requests.cpu" in table


def test_probes_follow_the_chart_and_take_a_pod_whose_epp_fails_out_of_the_service(objects):
    epp_container = container(objects, "epp")
    assert epp_container["livenessProbe"]["grpc"]["port"] == 9003
    # The chart's readiness check gates the pod's start and, as in the chart (every 2 s), its
    # place in the Service: its proxy could only refuse requests while the EPP is not ready.
    assert epp_container["startupProbe"]["grpc"] == {"port": 9003, "service": "readiness"}
    assert epp_container["startupProbe"]["periodSeconds"] * epp_container["startupProbe"]["failureThreshold"] == 300
    assert epp_container["readinessProbe"] == {"grpc": {"port": 9003, "service": "readiness"}, "periodSeconds": 2}
    envoy = container(objects, "envoy-proxy")
    assert envoy["readinessProbe"]["httpGet"] == {"path": "/ready", "port": 19001, "scheme": "HTTP"}
    assert envoy["livenessProbe"]["httpGet"]["port"] == 19001


@pytest.fixture(scope="module")
def tenant_objects() -> list[dict[str, Any]]:
    from components.specs import tenancy
    from platform_config.models import TenantConfig
    from platform_config.tenant_plan import tenant_plan

    tenant = TenantConfig.model_validate({"name": "team-a", "quota": {"gpu": 8, "cpu": "64", "memory": "256Gi", "pods": 40}})
    return [
        tenancy.namespace(tenant),
        tenancy.limit_range(tenant),
        *tenancy.resource_quotas(tenant_plan(tenant, ("nvidia.com/gpu",))),
        *tenancy.priority_classes(),
    ]


def test_the_deployment_is_admitted_in_a_restricted_tenant_namespace(objects, tenant_objects):
    from preview.admission import admit_and_schedule

    namespace = tenant_objects[0]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    # The system node group (not among the GPU pools the program exports as nodePools).
    system_pool = {
        "name": "system",
        "labels": dict(SYSTEM_NODE_SELECTOR),
        "taints": [],
        "allocatable": {"cpu": "7", "memory": "28Gi", "ephemeral-storage": "80Gi"},
        "maxSize": 3,
    }
    result = admit_and_schedule([*tenant_objects, *objects], [system_pool])
    (workload,) = [w for w in result.workloads if w.name == "llama-8b-v1-epp"]
    assert workload.findings == [] and workload.pool == "system"
    # The namespace injects the mesh's sidecar, at the size the quotas count for it.
    (sidecar,) = [c for c in workload.containers if c["name"] == "istio-proxy"]
    assert sidecar["resources"] == {
        "requests": {"cpu": MESH_PROXY_RESOURCES["cpu"], "memory": MESH_PROXY_RESOURCES["memory"]},
        "limits": {"memory": MESH_PROXY_RESOURCES["memory"]},
    }
    # The check would see a violation: the same Deployment without its security context fails.
    bare = one(objects, "Deployment")
    stripped = {**bare, "spec": {**bare["spec"], "template": {**bare["spec"]["template"]}}}
    spec = dict(stripped["spec"]["template"]["spec"])
    spec.pop("securityContext")
    spec["containers"] = [{k: v for k, v in c.items() if k != "securityContext"} for c in spec["containers"]]
    stripped["spec"]["template"]["spec"] = spec
    failed = admit_and_schedule([*tenant_objects, stripped], [system_pool])
    assert any("Pod Security restricted" in f for f in failed.findings)


def test_every_container_is_restricted_with_a_read_only_root(objects):
    spec = pod_spec(objects)
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in spec["containers"]:
        context = c["securityContext"]
        assert context["runAsNonRoot"] is True and context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]} and context["readOnlyRootFilesystem"] is True


def test_the_packs_pod_rules_pass(objects):
    sys.path.insert(0, str(ROOT / "policies"))
    from inference_governance import credentials, images, kube, pod_security

    deployment = one(objects, "Deployment")
    for validator in (pod_security.pod_security_baseline, credentials.no_secret_args, credentials.no_plain_secret_env):
        messages: list[str] = []
        args = SimpleNamespace(resource_type="kubernetes:apps/v1:Deployment", props=deployment, get_config=lambda: {})
        validator(args, lambda message, urn=None: messages.append(message))
        assert messages == [], validator.__name__
    # Images: pinned tags, from the repositories of the pinned images.
    messages = []
    repositories = sorted({kube.image_repository(pin.repository) for pin in pins.IMAGES})
    args = SimpleNamespace(
        resource_type="kubernetes:apps/v1:Deployment", props=deployment, get_config=lambda: {"allowedRepositories": repositories}
    )
    images.pinned_images(args, lambda message, urn=None: messages.append(message))
    assert messages == []


# --- RBAC, PDB, monitoring --------------------------------------------------------------------


def test_rbac_is_read_only_and_exactly_what_the_epp_watches(objects, plan):
    rules = one(objects, "Role")["rules"]
    granted = {(group, resource) for rule in rules for group in rule["apiGroups"] for resource in rule["resources"]}
    assert granted == {
        ("", "pods"),
        ("inference.networking.k8s.io", "inferencepools"),
        ("llm-d.ai", "inferenceobjectives"),
        ("llm-d.ai", "inferencemodelrewrites"),
    }
    assert all(rule["verbs"] == ["get", "watch", "list"] for rule in rules)
    binding = one(objects, "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "llama-8b-v1-epp", "namespace": plan.namespace}]
    assert pod_spec(objects)["serviceAccountName"] == "llama-8b-v1-epp"


def test_the_chart_grants_no_more_than_we_do_for_these_resources():
    roles = git_show("config/charts/llm-d-router-standalone/templates/rbac.yaml") + git_show(
        "config/charts/routerlib/templates/_rbac.yaml"
    )
    for resource in ("pods", "inferencepools", "inferenceobjectives", "inferencemodelrewrites"):
        assert resource in roles, resource


def test_pdb_and_pod_monitor_select_the_epp_pods(objects, plan):
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": epp.epp_selector(plan)}}
    monitor = one(objects, "PodMonitor")
    assert monitor["spec"]["selector"] == {"matchLabels": epp.epp_selector(plan)}


def test_prometheus_scrapes_the_epps_metrics_merged_into_its_sidecars(objects):
    # Istio merges what the annotations name (the EPP's 9090 /metrics) into the sidecar's 15020.
    annotations = one(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert {k: v for k, v in annotations.items() if k.startswith("prometheus.io/")} == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9090",
        "prometheus.io/path": "/metrics",
    }
    ports = {p["name"]: p["containerPort"] for p in container(objects, "epp")["ports"]}
    assert ports["metrics"] == 9090
    # The monitor scrapes the sidecar's target at the port Istio rewrites the annotation to,
    # as the Knative backend's PodMonitor does: 9090 itself takes mTLS only now.
    (endpoint,) = one(objects, "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert "port" not in endpoint and endpoint["path"] == "/stats/prometheus"
    keep, *moved = endpoint["relabelings"]
    assert keep == {"sourceLabels": ["__meta_kubernetes_pod_container_name"], "action": "keep", "regex": "istio-proxy"}
    assert moved == pod_parts.merged_metrics_relabelings()
    assert "--metrics-endpoint-auth=false" in container(objects, "epp")["args"]


# --- the mesh: mTLS end to end ---------------------------------------------------------------


def test_the_pod_is_in_the_mesh_with_a_sized_sidecar_that_outlives_its_requests(objects, plan, tenant_objects):
    template = one(objects, "Deployment")["spec"]["template"]
    annotations, labels = template["metadata"]["annotations"], template["metadata"]["labels"]
    namespace = tenant_objects[0]
    assert istio_injects(plan.namespace, namespace["metadata"]["labels"], labels, annotations, False)
    # Without a namespace that injects, the same pod would be out of the mesh: the check can fail.
    assert not istio_injects(plan.namespace, {}, labels, annotations, False)
    assert annotations["sidecar.istio.io/proxyCPU"] == MESH_PROXY_RESOURCES["cpu"]
    assert annotations["sidecar.istio.io/proxyMemory"] == MESH_PROXY_RESOURCES["memory"]
    assert annotations["sidecar.istio.io/proxyMemoryLimit"] == MESH_PROXY_RESOURCES["memory"]
    proxy = json.loads(annotations["proxy.istio.io/config"])
    assert proxy["holdApplicationUntilProxyStarts"] is True
    assert proxy["proxyMetadata"] == {"EXIT_ON_ZERO_ACTIVE_CONNECTIONS": "true"}
    # The sidecar may stay up as long as the pod does: past Envoy's preStop, to its last request.
    grace = template["spec"]["terminationGracePeriodSeconds"]
    assert proxy["terminationDrainDuration"] == f"{grace}s"
    assert grace > container(objects, "envoy-proxy")["lifecycle"]["preStop"]["sleep"]["seconds"]


def test_no_container_runs_as_the_sidecars_uid(objects):
    # Istio does not capture that uid's traffic: Envoy's requests would leave in plaintext.
    spec = pod_spec(objects)
    users = [spec["securityContext"]["runAsUser"]] + [c["securityContext"]["runAsUser"] for c in spec["containers"]]
    assert users == [epp.RUN_AS] * 3 and epp.ISTIO_PROXY_UID not in users


def test_no_object_relaxes_mtls_or_leaves_the_mesh(objects):
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"PeerAuthentication", "AuthorizationPolicy"}
    for rule in (o for o in objects if o["kind"] == "DestinationRule"):
        assert rule["spec"]["trafficPolicy"]["tls"]["mode"] == "ISTIO_MUTUAL"
    template = one(objects, "Deployment")["spec"]["template"]["metadata"]
    for key in (*template["annotations"], *template["labels"]):
        assert key != "sidecar.istio.io/inject" and not key.startswith("traffic.sidecar.istio.io/"), key


def test_the_pickers_requests_reach_the_picked_pod_over_istio_mtls(objects, plan):
    (rule,) = [o for o in objects if o["kind"] == "DestinationRule"]
    # Not named like the gateway's rule on the picker's own Service (the picker's name).
    assert (rule["metadata"]["name"], rule["metadata"]["namespace"]) == ("llama-8b-v1-epp-to-servers", plan.namespace)
    assert rule["spec"] == {
        "host": SERVER_HOST,
        # Only the picker's sidecars: the servers' own and other clients' keep their rules.
        "workloadSelector": {"matchLabels": epp.epp_selector(plan)},
        "exportTo": ["."],
        # To the pod IP Envoy dialled (ORIGINAL_DST), always with Istio's mTLS.
        "trafficPolicy": {"loadBalancer": {"simple": "PASSTHROUGH"}, "tls": {"mode": "ISTIO_MUTUAL"}},
    }
    # Envoy sends every request with that host, so the sidecar routes it through that rule.
    envoy = epp.proxy_config(plan)
    (listener,) = [l for l in envoy["static_resources"]["listeners"] if l["name"] == "vllm"]
    routes = listener["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]["virtual_hosts"][0]["routes"]
    forwarding = [r["route"] for r in routes if "route" in r]
    assert {r["host_rewrite_literal"] for r in forwarding} == {rule["spec"]["host"]}
    assert {r["cluster"] for r in forwarding} == {"original_destination_cluster"}


def milliseconds(duration: str) -> int:
    """A Go duration of one unit, ms or s, as the EPP's config takes them."""
    number, unit = re.fullmatch(r"(\d+)(ms|s)", duration).groups()  # type: ignore[union-attr]
    return int(number) * (1 if unit == "ms" else 1000)


def test_the_epp_reads_server_metrics_from_their_sidecars(plan):
    config = epp.endpoint_picker_config(plan)
    (source,) = [p for p in config["plugins"] if p["type"] == "metrics-data-source"]
    assert source["parameters"] == {"scheme": "http", "path": "/stats/prometheus", "port": 15020, "interval": "250ms"}
    # Metrics count a server as full only once four reads are missed (upstream: 50 ms reads,
    # 200 ms): at its default of 200 ms, every server would look full between 250 ms reads.
    (detector,) = [p for p in config["plugins"] if p["type"] == "utilization-detector"]
    staleness = detector["parameters"]["metricsStalenessThreshold"]
    assert milliseconds(staleness) == 4 * milliseconds(source["parameters"]["interval"])
    # The servers' sidecars merge vLLM's metrics: their pods name vLLM's port and path.
    # All pod_annotations reads: the drain, the registry entry (none: a version pinned in the stack), its chat
    # template (none), the weight mirror's source (none), whether its pool lets the autoscaler remove the node (not here:
    # no volumes to name) and the LoRA adapters (none).
    server = cast(
        Any,
        SimpleNamespace(
            drain=SimpleNamespace(grace_seconds=600),
            registry_entry=None,
            chat_template=None,
            mirrored_from=None,
            evictable_local_volumes=False,
            lora=None,
        ),
    )
    annotations = server_pod.pod_annotations(server)
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(plan.target_port) and annotations["prometheus.io/path"] == "/metrics"


def test_the_mesh_facts_are_istios():
    assert "StatusPort:     15020," in istio_show("pkg/config/mesh/mesh.go")
    assert epp.MESH_STATUS_PORT == 15020
    webhook = istio_show("pkg/kube/inject/webhook.go")
    assert f'pod.Annotations["prometheus.io/path"] = "{epp.MESH_METRICS_PATH}"' in webhook
    template = istio_show("manifests/charts/istio-control/istio-discovery/files/injection-template.yaml")
    # The status port is left out of inbound capture; the proxy's uid out of outbound capture.
    assert '- "15090,15021,{{ excludeInboundPort (annotation .ObjectMeta `status.sidecar.istio.io/port`' in template
    assert f'.ProxyUID | default "{epp.ISTIO_PROXY_UID}"' in template
    assert f"- name: {epp.ISTIO_PROXY_CONTAINER}" in template
    policy = istio_show("pilot/pkg/networking/core/cluster_traffic_policy.go")
    assert re.search(r"case networking.LoadBalancerSettings_PASSTHROUGH:\n.*CLUSTER_PROVIDED\n.*Cluster_ORIGINAL_DST", policy)
    validation = istio_show("pkg/config/validation/validation.go")
    assert "destination rule with workload selector cannot have exportTo beyond current namespace" in validation
    assert "ExitOnZeroActiveConnections" in istio_show("pkg/model/proxy.go")


def test_network_policies_select_the_right_pods(objects, plan):
    policies = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "NetworkPolicy"}
    ingress = policies["llama-8b-v1-epp-ingress"]
    assert ingress["podSelector"] == {"matchLabels": epp.epp_selector(plan)} and ingress["policyTypes"] == ["Ingress"]
    gateway_rule, monitoring_rule = ingress["ingress"]
    assert gateway_rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: ISTIO_INGRESS_NAMESPACE}},
            "podSelector": {"matchLabels": GATEWAY_SELECTOR},
        }
    ]
    assert gateway_rule["ports"] == [{"protocol": "TCP", "port": 8081}]
    # Monitoring scrapes the sidecar's merged metrics, not 9090.
    assert monitoring_rule == {
        "from": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: MONITORING_NAMESPACE}}}],
        "ports": [{"protocol": "TCP", "port": 15020}],
    }
    # The vLLM port (mTLS) and the servers' sidecars' merged metrics, both ways.
    vllm_and_metrics = [{"protocol": "TCP", "port": 8000}, {"protocol": "TCP", "port": 15020}]
    egress = policies["llama-8b-v1-epp-to-servers"]
    assert egress["podSelector"] == {"matchLabels": epp.epp_selector(plan)} and egress["policyTypes"] == ["Egress"]
    assert egress["egress"] == [{"to": [{"podSelector": {"matchLabels": SERVER_LABELS}}], "ports": vllm_and_metrics}]
    servers = policies["llama-8b-v1-epp-servers-from-epp"]
    assert servers["podSelector"] == {"matchLabels": SERVER_LABELS} and servers["policyTypes"] == ["Ingress"]
    assert servers["ingress"] == [{"from": [{"podSelector": {"matchLabels": epp.epp_selector(plan)}}], "ports": vllm_and_metrics}]
    # The EPP pods' own labels are what these selectors match.
    labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert epp.epp_selector(plan).items() <= labels.items()


def test_control_headers_are_upstreams_and_covered_by_the_prefixes():
    consts = git_show("pkg/epp/metadata/consts.go")
    declared = set(re.findall(r'= "(x-[a-z0-9-]+)"', consts))
    # Two keys there are only ever dynamic metadata (scores and the endpoint that served), not
    # request headers; the prefixes cover them anyway.
    metadata_only = {"x-gateway-destination-endpoint-scores", "x-gateway-destination-endpoint-served"}
    assert declared - metadata_only == set(epp.EPP_CONTROL_HEADERS)
    assert all(key.startswith(epp.EPP_CONTROL_HEADER_PREFIXES) for key in metadata_only)
    assert all(header.startswith(epp.EPP_CONTROL_HEADER_PREFIXES) for header in epp.EPP_CONTROL_HEADERS)
    assert f'RequestDroppedReasonHeaderKey = "{epp.DROPPED_REASON_HEADER}"' in git_show("pkg/common/error/error.go")
    assert epp.OBJECTIVE_HEADER in epp.EPP_CONTROL_HEADERS


def test_pods_go_to_the_system_nodes_where_the_platform_builds_them():
    assert pod_spec(epp.endpoint_picker_objects(make_plan()))["nodeSelector"] == {"inference.platform/pool": "system"}
    # On a cluster the platform does not build, no pool is known: the cluster's scheduler places them.
    assert "nodeSelector" not in pod_spec(epp.endpoint_picker_objects(make_plan(node_selector={})))


def route_for(routes: list[dict[str, Any]], headers: dict[str, str]) -> dict[str, Any]:
    """The first route whose match takes these request headers (prefix "/", exact and present
    header matches: all the proxy uses), as Envoy picks it."""
    for route in routes:
        match = route["match"]
        assert set(match) <= {"prefix", "headers"} and match["prefix"] == "/"
        if all(
            (h["name"] in headers) if h.get("present_match") else headers.get(h["name"]) == h["string_match"]["exact"]
            for h in match.get("headers", [])
        ):
            return route
    raise AssertionError(f"no route for {headers}")


def test_a_request_is_routed_to_its_tiers_wait_then_to_the_pod_the_epp_names(plan):
    routes = epp.picker_routes(plan)
    objective = {tier: epp.objective_of(plan.name, tier) for tier in ("premium", "standard", "batch")}
    # Picked: to the pod the EPP named, whatever the tier.
    for tier in objective.values():
        picked = route_for(routes, {"x-llm-d-inference-objective": tier, "x-gateway-destination-endpoint": "10.0.0.7:8000"})
        assert picked["name"] == "picked" and picked["route"]["cluster"] == "original_destination_cluster"
    # Waiting for the EPP: the tier's queued route, which only times the wait; nothing unpicked
    # is forwarded (no destination header: the ORIGINAL_DST cluster has no host).
    for tier, name in objective.items():
        queued = route_for(routes, {"x-llm-d-inference-objective": name})
        assert queued["name"] == f"{tier}-queued" and queued["route"]["cluster"] == "original_destination_cluster"
    # An objective no tier of this version has: 503 with the longest tier's Retry-After.
    for headers in ({"x-llm-d-inference-objective": "other-v1-premium"}, {}):
        unknown = route_for(routes, headers)
        added = {h["header"]["key"]: h["header"]["value"] for h in unknown["response_headers_to_add"]}
        assert unknown["direct_response"]["status"] == 503
        assert added == {"retry-after": "30", "x-llm-d-request-dropped-reason": "picker-unavailable"}
    clusters = {c["name"] for c in epp.proxy_config(plan)["static_resources"]["clusters"]}
    assert clusters == {"prometheus_stats", "original_destination_cluster", "ext_proc"}


def test_every_refusal_of_the_proxy_is_a_429_with_a_reason_and_its_own_tiers_retry_after(plan):
    *own, passed_on = epp.proxy_replies(plan)["mappers"]
    assert len(own) == 2 * len(plan.bands) and all(m["status_code"] == epp.REFUSED == 429 for m in (*own, passed_on))
    cause = {epp.QUEUE_BOUND_EXCEEDED: "'stream_idle_timeout'", epp.PICKER_UNAVAILABLE: "startsWith('ext_proc_error')"}
    for mapper in own:
        expression = mapper["filter"]["extension_filter"]["typed_config"]["expression"]
        (band,) = [b for b in plan.bands if f"== '{epp.objective_of(plan.name, b.tier)}'" in expression]
        headers = {h["header"]["key"]: h["header"]["value"] for h in mapper["headers_to_add"]}
        assert headers["retry-after"] == str(band.queue_seconds)
        # Each reason for its own cause, and only for a request no pod was named for.
        assert cause[headers["x-llm-d-request-dropped-reason"]] in expression
        assert "!('x-gateway-destination-endpoint' in request.headers)" in expression
    # The EPP's own 503s keep their reason and Retry-After; only the code changes.
    assert "headers_to_add" not in passed_on and "body" not in passed_on


def test_sheddable_tiers_are_evicted_for_higher_ones_only_when_both_share_a_picker(plan):
    # make_plan: premium, standard and a sheddable batch band.
    assert epp.endpoint_picker_config(plan)["flowControl"]["enableEviction"] is True
    alone = dataclasses.replace(plan, bands=tuple(b for b in plan.bands if b.priority < 0))
    assert "enableEviction" not in epp.endpoint_picker_config(alone)["flowControl"]
    unsheddable = dataclasses.replace(plan, bands=tuple(b for b in plan.bands if b.priority >= 0))
    assert "enableEviction" not in epp.endpoint_picker_config(unsheddable)["flowControl"]
