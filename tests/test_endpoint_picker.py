"""The llm-d router's endpoint picker in front of one model version: every object passes the
upstream schemas, Pod Security restricted, our admission model and the pack's pod rules; the pool,
its objectives, the Service, the Deployment's flags (those llm-d-router v0.10.0 defines), images,
probes, RBAC and monitoring are what the plan says. The EPP's config: tests/test_endpoint_picker_config.py;
its proxy, the mesh and the network rules: tests/test_endpoint_picker_proxy.py."""

from __future__ import annotations

import re
import sys
from types import SimpleNamespace

import yaml

from components.constants import SYSTEM_NODE_SELECTOR
from components.specs import endpoint_picker as epp
from components.specs import pod_parts
from platform_config import pins
from platform_config.serving import MESH_PROXY_RESOURCES

from .endpoint_picker_helpers import SERVER_LABELS, container, git_show, make_plan, one, picker_fixtures, pod_spec
from .helpers import ROOT, schema_validator

plan, objects, tenant_objects = picker_fixtures()


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
