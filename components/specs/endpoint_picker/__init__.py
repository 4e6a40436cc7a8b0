"""The llm-d router's endpoint picker (EPP) in front of one model version's servers, in
standalone mode: the EPP and an Envoy proxy container in one pod, flow control on (pure builders).

The gateway sends a version's requests to that Envoy (`<name>-epp:8081`); Envoy asks the
EPP (ext_proc over loopback) which vLLM pod to use, the EPP queues the request by priority band
while the pods are saturated, and Envoy then dials that pod's IP (ORIGINAL_DST on the
`x-gateway-destination-endpoint` header the EPP sets).

Security: the EPP pod is in the mesh like every tenant pod, so mTLS and the tenant's
authorization hold on both hops with nothing relaxed. Gateway -> EPP is a mesh Service call
(auto-mTLS). EPP -> vLLM: Envoy rewrites the Host to the version's Service on the target port
(`server_host`), so the pod's Istio sidecar, which intercepts Envoy's connection to
podIP:<target port> (vLLM's 8000, or a Knative pod's queue-proxy on 8012), routes it through that
Service's cluster; a DestinationRule that only the EPP pods see makes that cluster ORIGINAL_DST
(the connection still goes to the pod the EPP picked) with Istio mTLS stated explicitly. The
vLLM pods see the EPP's SPIFFE identity, which the tenant's namespace rule admits. The EPP reads
the servers' metrics, and Prometheus the EPP's, through the sidecars' merged metrics endpoint
(15020, outside inbound capture). The NetworkPolicies state those paths (gateway and monitoring
to the EPP pods, EPP pods to this version's servers); the tenant's own policies already admit its
namespace, so they document rather than narrow what the tenant's isolation allows.

Every object follows the upstream chart at tag v0.10.0 of github.com/llm-d/llm-d-router
(LR below): `config/charts/routerlib/templates/*.yaml` and the Envoy preset of
`config/charts/llm-d-router-standalone/values.yaml` (SA below). We render them ourselves, not
through Helm, so each one goes through the preview's schema, admission and policy checks. Where
we differ from the chart, the comment says so and why. Istio's behaviour is cited from
github.com/istio/istio at tag 1.30.3 (IS below), the mesh the platform installs.

One module per concern, each importing only those before it (the plan they read is
components/picker_plan.py): `headers`, `names` (ports, names, labels), `plan_rules` (the checks
and derived timeouts), `picker_config` (the EPP's EndpointPickerConfig), `envoy_routes` and
`envoy_config` (the proxy), `pods` (the containers and the Deployment) and `objects` (every
object, in apply order). The names the package had as one module are re-exported here; the
program imports each from its module.
"""

from __future__ import annotations

from ...picker_plan import (
    EndpointPickerPlan,
    PickerBand,
)
from .envoy_config import (
    UPSTREAM_IDLE_SECONDS,
    proxy_config,
)
from .envoy_routes import (
    PICKER_UNAVAILABLE,
    QUEUE_BOUND_EXCEEDED,
    REFUSED,
    picker_routes,
    proxy_replies,
    queued_idle_timeout,
)
from .headers import (
    DESTINATION_HEADER,
    DROPPED_REASON_HEADER,
    EPP_CONTROL_HEADER_PREFIXES,
    EPP_CONTROL_HEADERS,
    FAIRNESS_HEADER,
    OBJECTIVE_HEADER,
)
from .names import (
    COMPONENT,
    EPP_CONFIG_DIR,
    EPP_CONFIG_FILE,
    EPP_CONTAINER,
    EPP_GRPC_PORT,
    EPP_HEALTH_PORT,
    EPP_METRICS_PORT,
    EPP_PROXY_PORT,
    ISTIO_PROXY_CONTAINER,
    ISTIO_PROXY_UID,
    MAX_NAME_LENGTH,
    MESH_METRICS_PATH,
    MESH_STATUS_PORT,
    MODE_LABEL,
    OBJECTIVE_GROUP,
    POOL_GROUP,
    PROXY_ADMIN_PORT,
    PROXY_CONFIG_DIR,
    PROXY_CONFIG_FILE,
    PROXY_CONTAINER,
    PROXY_READY_PORT,
    SELECTOR_LABEL,
    epp_host_of,
    epp_name,
    epp_name_of,
    epp_selector,
    epp_selector_of,
    objective_name,
    objective_of,
    proxy_config_map_name,
)
from .objects import (
    EPP_ROLE_RULES,
    endpoint_picker_objects,
    epp_config_map,
    inference_objectives,
    inference_pool,
    network_policies,
    pod_disruption_budget,
    pod_monitor,
    pool_selector,
    proxy_config_map,
    role,
    role_binding,
    servers_destination_rule,
    service,
    service_account,
)
from .picker_config import (
    CONFIG_TYPES,
    EPP_CONFIG_FIELDS,
    EPP_PLUGINS,
    FLOW_CONTROL_GATE,
    LORA_AFFINITY_SCORER,
    PICKER_VLLM_SERIES,
    SATURATION_DETECTOR,
    SCORER_WEIGHTS,
    SERVER_METRICS_INTERVAL,
    SERVER_METRICS_STALENESS,
    endpoint_picker_config,
)
from .plan_rules import (
    DRAIN_SECONDS,
    EPP_POD_RESOURCES,
    GRACE_MARGIN_SECONDS,
    PROXY_WORKERS,
    QUEUE_MEMORY_SHARE,
    TIERS,
    check_plan,
    proxy_pre_stop_seconds,
    queue_ttl_seconds,
    route_timeout_seconds,
    sorted_bands,
    termination_grace_seconds,
    total_queue_bytes,
)
from .pods import (
    EPP_FLAGS,
    RUN_AS,
    deployment,
    epp_args,
    epp_container,
    pod_annotations,
    proxy_container,
)

__all__ = [
    "EPP_PROXY_PORT",
    "EPP_METRICS_PORT",
    "EPP_GRPC_PORT",
    "EPP_HEALTH_PORT",
    "PROXY_READY_PORT",
    "PROXY_ADMIN_PORT",
    "MESH_STATUS_PORT",
    "MESH_METRICS_PATH",
    "ISTIO_PROXY_CONTAINER",
    "ISTIO_PROXY_UID",
    "OBJECTIVE_HEADER",
    "DROPPED_REASON_HEADER",
    "DESTINATION_HEADER",
    "FAIRNESS_HEADER",
    "EPP_CONTROL_HEADERS",
    "EPP_CONTROL_HEADER_PREFIXES",
    "TIERS",
    "POOL_GROUP",
    "OBJECTIVE_GROUP",
    "EPP_CONTAINER",
    "PROXY_CONTAINER",
    "COMPONENT",
    "SELECTOR_LABEL",
    "MODE_LABEL",
    "MAX_NAME_LENGTH",
    "EPP_CONFIG_FILE",
    "EPP_CONFIG_DIR",
    "PROXY_CONFIG_FILE",
    "PROXY_CONFIG_DIR",
    "RUN_AS",
    "DRAIN_SECONDS",
    "GRACE_MARGIN_SECONDS",
    "UPSTREAM_IDLE_SECONDS",
    "SERVER_METRICS_INTERVAL",
    "SERVER_METRICS_STALENESS",
    "EPP_POD_RESOURCES",
    "PROXY_WORKERS",
    "QUEUE_MEMORY_SHARE",
    "EPP_FLAGS",
    "CONFIG_TYPES",
    "EPP_CONFIG_FIELDS",
    "EPP_PLUGINS",
    "FLOW_CONTROL_GATE",
    "SATURATION_DETECTOR",
    "PICKER_VLLM_SERIES",
    "SCORER_WEIGHTS",
    "LORA_AFFINITY_SCORER",
    "PickerBand",
    "EndpointPickerPlan",
    "epp_name_of",
    "epp_host_of",
    "objective_of",
    "epp_selector_of",
    "epp_name",
    "proxy_config_map_name",
    "objective_name",
    "epp_selector",
    "queue_ttl_seconds",
    "route_timeout_seconds",
    "proxy_pre_stop_seconds",
    "termination_grace_seconds",
    "check_plan",
    "total_queue_bytes",
    "sorted_bands",
    "endpoint_picker_config",
    "PICKER_UNAVAILABLE",
    "QUEUE_BOUND_EXCEEDED",
    "queued_idle_timeout",
    "picker_routes",
    "REFUSED",
    "proxy_replies",
    "proxy_config",
    "service_account",
    "EPP_ROLE_RULES",
    "role",
    "role_binding",
    "epp_config_map",
    "proxy_config_map",
    "epp_args",
    "epp_container",
    "proxy_container",
    "pod_annotations",
    "deployment",
    "service",
    "pool_selector",
    "inference_pool",
    "inference_objectives",
    "pod_disruption_budget",
    "pod_monitor",
    "servers_destination_rule",
    "network_policies",
    "endpoint_picker_objects",
]
