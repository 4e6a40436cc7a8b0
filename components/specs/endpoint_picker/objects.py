"""Every Kubernetes and custom object of one model version's endpoint picker, in apply order
(`endpoint_picker_objects`): its identity, its two ConfigMaps, the network and mesh rules its pods
need, the InferencePool and InferenceObjectives, its Service and pods, and what watches them. LR, SA
and IS name the upstream sources the package's docstring cites."""

from __future__ import annotations

import json
from typing import Any

from ...constants import GATEWAY_SELECTOR, ISTIO_INGRESS_NAMESPACE, MONITORING_NAMESPACE
from ...picker_plan import EndpointPickerPlan
from ...yaml_text import BlockYaml, JsonDumper
from ..network import NAMESPACE_NAME_LABEL
from ..pod_parts import merged_metrics_relabelings
from .envoy_config import proxy_config
from .names import (
    EPP_CONFIG_FILE,
    EPP_GRPC_PORT,
    EPP_METRICS_PORT,
    EPP_PROXY_PORT,
    ISTIO_PROXY_CONTAINER,
    MESH_METRICS_PATH,
    MESH_STATUS_PORT,
    OBJECTIVE_GROUP,
    POOL_GROUP,
    PROXY_CONFIG_FILE,
    epp_name,
    epp_selector,
    metadata,
    objective_name,
    proxy_config_map_name,
)
from .picker_config import endpoint_picker_config
from .plan_rules import check_plan, sorted_bands
from .pods import deployment

# --- Kubernetes objects ---------------------------------------------------------------------


def service_account(plan: EndpointPickerPlan) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(plan, epp_name(plan))}


_READ = ["get", "watch", "list"]
# What the EPP reads at v0.10.0, all in its own namespace: pods (routerlib _rbac.yaml `-sa`
# Role), its InferencePool and the InferenceObjectives/InferenceModelRewrites that name it (SA
# templates/rbac.yaml `-non-sa` Role; the caches are LR pkg/epp/server/controller_manager.go).
# Not granted: the legacy inference.networking.x-k8s.io group (the EPP prefers llm-d.ai when
# both exist, controller_config.go, and the platform installs llm-d.ai); leases (leader election
# off); tokenreviews/subjectaccessreviews (metrics auth off). Nothing is written.
EPP_ROLE_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["pods"], "verbs": list(_READ)},
    {"apiGroups": [POOL_GROUP], "resources": ["inferencepools"], "verbs": list(_READ)},
    {"apiGroups": [OBJECTIVE_GROUP], "resources": ["inferenceobjectives", "inferencemodelrewrites"], "verbs": list(_READ)},
)


def role(plan: EndpointPickerPlan) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(plan, epp_name(plan)),
        "rules": json.loads(json.dumps(EPP_ROLE_RULES)),
    }


def role_binding(plan: EndpointPickerPlan) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(plan, epp_name(plan)),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": epp_name(plan)},
        "subjects": [{"kind": "ServiceAccount", "name": epp_name(plan), "namespace": plan.namespace}],
    }


# The pickers' documents are the largest strings the program writes: libyaml's text, written without its nodes
# (components/yaml_text.py).
_PICKER_YAML = BlockYaml(JsonDumper, width=1000)


def _dump(document: dict[str, Any]) -> str:
    # Through JSON first, so what is written is JSON's values only (a tuple a list, every key a string), as the
    # pickers read it: `yaml.dump(..., Dumper=JsonDumper, sort_keys=False, default_flow_style=False, width=1000)`.
    return _PICKER_YAML.dump(json.loads(json.dumps(document)))


def epp_config_map(plan: EndpointPickerPlan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(plan, epp_name(plan)),
        "data": {EPP_CONFIG_FILE: _dump(endpoint_picker_config(plan))},
    }


def proxy_config_map(plan: EndpointPickerPlan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(plan, proxy_config_map_name(plan)),
        "data": {PROXY_CONFIG_FILE: _dump(proxy_config(plan))},
    }


def service(plan: EndpointPickerPlan) -> dict[str, Any]:
    """routerlib _service.yaml plus the standalone chart's `http` port (SA extraServicePorts).
    Behind the sidecar every port takes mTLS only: Prometheus scrapes the merged metrics on the
    pods instead (pod_monitor), and ext_proc is reached over loopback."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(plan, epp_name(plan)),
        "spec": {
            "type": "ClusterIP",
            "selector": epp_selector(plan),
            "ports": [
                {"name": "grpc-ext-proc", "protocol": "TCP", "port": EPP_GRPC_PORT, "appProtocol": "kubernetes.io/h2c"},
                {"name": "http-metrics", "protocol": "TCP", "port": EPP_METRICS_PORT},
                {"name": "http", "protocol": "TCP", "port": EPP_PROXY_PORT, "targetPort": EPP_PROXY_PORT},
            ],
        },
    }


def pool_selector(plan: EndpointPickerPlan) -> dict[str, str]:
    """The labels of the pods the picker picks from."""
    return dict(plan.pool_labels if plan.pool_labels is not None else plan.server_labels)


def inference_pool(plan: EndpointPickerPlan) -> dict[str, Any]:
    """routerlib _inferencepool.yaml. failureMode FailClose, like our Envoy (the chart: FailOpen);
    it is read by gateways that route to the pool, which ours does not."""
    return {
        "apiVersion": f"{POOL_GROUP}/v1",
        "kind": "InferencePool",
        "metadata": metadata(plan, plan.name),
        "spec": {
            "targetPorts": [{"number": plan.target_port}],
            "appProtocol": "http",
            "selector": {"matchLabels": pool_selector(plan)},
            "endpointPickerRef": {"name": epp_name(plan), "port": {"number": EPP_GRPC_PORT}, "failureMode": "FailClose"},
        },
    }


def inference_objectives(plan: EndpointPickerPlan) -> list[dict[str, Any]]:
    """routerlib _inferenceobjective.yaml, one per band, highest priority first."""
    return [
        {
            "apiVersion": "llm-d.ai/v1alpha2",
            "kind": "InferenceObjective",
            "metadata": metadata(plan, objective_name(plan, band.tier)),
            "spec": {"priority": band.priority, "poolRef": {"group": POOL_GROUP, "name": plan.name}},
        }
        for band in sorted_bands(plan)
    ]


def pod_disruption_budget(plan: EndpointPickerPlan) -> dict[str, Any]:
    """One EPP pod away at a time (the chart has no PDB). With one replica a drain takes the
    version's EPP away until it is rescheduled; production runs two or more."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(plan, epp_name(plan)),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": epp_selector(plan)}},
    }


def pod_monitor(plan: EndpointPickerPlan) -> dict[str, Any]:
    """The EPP's metrics (flow control's queue sizes among them) merged into its sidecar's, as
    the Knative backend scrapes its pods (components/backends/knative.py pod_monitor): the
    sidecar's target, moved to the port Istio writes into prometheus.io/port (MESH_STATUS_PORT;
    the sidecar declares only 15090, Envoy's stats alone). The interval is the chart's
    monitoring.interval (routerlib values.yaml)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": metadata(plan, epp_name(plan)),
        "spec": {
            "selector": {"matchLabels": epp_selector(plan)},
            "podMetricsEndpoints": [
                {
                    "path": MESH_METRICS_PATH,
                    "interval": "10s",
                    "relabelings": [
                        {
                            "sourceLabels": ["__meta_kubernetes_pod_container_name"],
                            "action": "keep",
                            "regex": ISTIO_PROXY_CONTAINER,
                        },
                        *merged_metrics_relabelings(),
                    ],
                }
            ],
        },
    }


# --- EPP -> servers over mTLS --------------------------------------------------------------


def servers_destination_rule(plan: EndpointPickerPlan) -> dict[str, Any]:
    """For the EPP pods' sidecars only, the servers' Service (`server_host`, where Envoy's
    rewritten Host sends them) becomes:
    - PASSTHROUGH: an ORIGINAL_DST cluster (IS pilot/pkg/networking/core/
      cluster_traffic_policy.go applyLoadBalancer), so each connection goes to the pod IP Envoy
      dialled, the one the EPP picked, not to one the sidecar would balance to;
    - ISTIO_MUTUAL, stated: auto-mTLS on a passthrough cluster guesses plaintext when the
      Service has no endpoints yet (pilot/pkg/model/push_context.go
      BestEffortInferServiceMTLSMode) and ORIGINAL_DST clusters get no per-endpoint TLS match
      (cluster_tls.go applyUpstreamTLSSettings); a stated mode is applied as is, with the
      Service's accounts as the names to verify (cluster_tls.go buildUpstreamTLSSettings).
    workloadSelector keeps it off every other pod, the servers' own and other clients'
    (pilot/pkg/model/sidecar.go DestinationRule); such a rule may only be exported to its own
    namespace (pkg/config/validation/validation.go)."""
    return {
        "apiVersion": "networking.istio.io/v1",
        "kind": "DestinationRule",
        "metadata": metadata(plan, f"{epp_name(plan)}-to-servers"),
        "spec": {
            "host": plan.server_host,
            "workloadSelector": {"matchLabels": epp_selector(plan)},
            "exportTo": ["."],
            "trafficPolicy": {"loadBalancer": {"simple": "PASSTHROUGH"}, "tls": {"mode": "ISTIO_MUTUAL"}},
        },
    }


def _network_policy(
    plan: EndpointPickerPlan, name: str, pods: dict[str, str], kind: str, rules: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(plan, name),
        "spec": {"podSelector": {"matchLabels": pods}, "policyTypes": [kind], kind.lower(): rules},
    }


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def network_policies(plan: EndpointPickerPlan) -> list[dict[str, Any]]:
    """On top of the tenant's default deny (tenancy.network_policies): EPP pods take the
    gateway's requests on 8081 and monitoring's scrapes of their sidecars' merged metrics, and
    reach this version's vLLM pods on the target port and their sidecars' metrics (the API server,
    DNS, istiod and HTTPS are already open to every tenant pod); the vLLM pods take both ports
    from EPP pods."""
    epp = epp_selector(plan)
    gateway = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: ISTIO_INGRESS_NAMESPACE}},
        "podSelector": {"matchLabels": dict(GATEWAY_SELECTOR)},
    }
    monitoring = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: MONITORING_NAMESPACE}}}
    return [
        _network_policy(
            plan,
            f"{epp_name(plan)}-ingress",
            epp,
            "Ingress",
            [{"from": [gateway], "ports": _tcp(EPP_PROXY_PORT)}, {"from": [monitoring], "ports": _tcp(MESH_STATUS_PORT)}],
        ),
        _network_policy(
            plan,
            f"{epp_name(plan)}-to-servers",
            epp,
            "Egress",
            [
                {
                    "to": [{"podSelector": {"matchLabels": dict(plan.server_labels)}}],
                    "ports": _tcp(plan.target_port, MESH_STATUS_PORT),
                }
            ],
        ),
        _network_policy(
            plan,
            f"{epp_name(plan)}-servers-from-epp",
            dict(plan.server_labels),
            "Ingress",
            [{"from": [{"podSelector": {"matchLabels": epp}}], "ports": _tcp(plan.target_port, MESH_STATUS_PORT)}],
        ),
    ]


def endpoint_picker_objects(plan: EndpointPickerPlan) -> list[dict[str, Any]]:
    """Every object, in apply order: identity and config, then the network and mesh rules the
    pods need (the DestinationRule before any request leaves a pod), the pool and objectives
    the EPP waits for, then the pods and what watches them."""
    check_plan(plan)
    return [
        service_account(plan),
        role(plan),
        role_binding(plan),
        epp_config_map(plan),
        proxy_config_map(plan),
        *network_policies(plan),
        servers_destination_rule(plan),
        inference_pool(plan),
        *inference_objectives(plan),
        service(plan),
        deployment(plan),
        pod_disruption_budget(plan),
        pod_monitor(plan),
    ]
