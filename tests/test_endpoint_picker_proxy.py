"""The endpoint picker's proxy and the mesh it sits in: the queue's TTL and the route timeouts, the proxy's
routes and refusals, the chart's preset it starts from, mTLS end to end with a sized sidecar, the network
rules, and the Istio 1.30.3 and llm-d-router facts they rest on (held against their source)."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from typing import Any, cast

import yaml

from components.constants import GATEWAY_SELECTOR, ISTIO_INGRESS_NAMESPACE, MONITORING_NAMESPACE
from components.specs import endpoint_picker as epp
from components.specs import pod as server_pod
from components.specs.network import NAMESPACE_NAME_LABEL
from platform_config import pins
from platform_config.serving import MESH_PROXY_RESOURCES
from preview.admission import istio_injects

from .endpoint_picker_helpers import SERVER_HOST, SERVER_LABELS, container, git_show, istio_show, one, picker_fixtures, pod_spec

plan, objects, tenant_objects = picker_fixtures()


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
