"""What the endpoint picker's objects, ports and pods are called, and the labels and metadata every
object carries. Each name rule takes the version's server name, so routes (which know a model and a
version, not the picker's plan) and the picker's own objects name things the same way. LR, SA and IS
name the upstream sources the package's docstring cites."""

from __future__ import annotations

from typing import Any

from ...constants import ENDPOINT_PICKER_COMPONENT, LABEL_COMPONENT, LABEL_NAME
from ...picker_plan import EndpointPickerPlan

# --- ports ----------------------------------------------------------------------------------
# Envoy's listener for the model's traffic, and the EPP Service port named "http" (SA
# extraServicePorts {name: http, port: 8081, targetPort: 8081}; listener `vllm` port_value 8081).
EPP_PROXY_PORT = 8081
# The EPP's Prometheus metrics (LR pkg/epp/server/options.go NewOptions MetricsPort 9090; routerlib
# _deployment.yaml containerPort `metrics` 9090; _service.yaml `http-metrics`).
EPP_METRICS_PORT = 9090
# ext_proc gRPC (LR options.go DefaultGrpcPort 9002; _deployment.yaml containerPort `grpc` 9002,
# hard-coded there; _service.yaml `grpc-ext-proc`, appProtocol kubernetes.io/h2c).
EPP_GRPC_PORT = 9002
# gRPC health for the kubelet's probes (LR options.go GRPCHealthPort 9003; routerlib values
# epp.grpcHealthPort 9003, rendered as --grpc-health-port).
EPP_HEALTH_PORT = 9003
# Envoy's readiness listener serving /ready, and its admin on loopback (SA envoy.yaml listener
# `envoy-proxy-ready-0.0.0.0-19001`, admin 127.0.0.1:19000).
PROXY_READY_PORT = 19001
PROXY_ADMIN_PORT = 19000

# --- the mesh -------------------------------------------------------------------------------
# The Istio sidecar's status port and the merged metrics it serves there: Envoy's, the agent's
# and the application's named by the pod's prometheus.io/port and path annotations, which the
# injector moves into the sidecar's environment and rewrites to point here (IS
# pkg/config/mesh/mesh.go DefaultProxyConfig StatusPort 15020; pkg/kube/inject/webhook.go
# applyPrometheusMerge; pilot/cmd/pilot-agent/status/server.go handleStats; merging is on mesh-wide,
# components/specs/mesh.py istiod_values enablePrometheusMerge). The injector leaves the status port out
# of inbound capture (manifests/charts/istio-control/istio-discovery/files/injection-template.yaml,
# istio-iptables `-d`), so it takes plaintext scrapes under STRICT mTLS.
MESH_STATUS_PORT = 15020
MESH_METRICS_PATH = "/stats/prometheus"
ISTIO_PROXY_CONTAINER = "istio-proxy"  # injection-template.yaml
# The sidecar's uid: istio-iptables does not capture this uid's outbound traffic (`-u`, the
# template's `.ProxyUID | default "1337"`), so a container running as it would bypass the sidecar.
ISTIO_PROXY_UID = 1337

# --- groups, containers, labels and files ---------------------------------------------------
POOL_GROUP = "inference.networking.k8s.io"  # LR options.go --pool-group; routerlib _deployment.yaml
OBJECTIVE_GROUP = "llm-d.ai"  # InferenceObjective, InferenceModelRewrite (LR config/crd/bases)
EPP_CONTAINER = "epp"  # routerlib _deployment.yaml
PROXY_CONTAINER = "envoy-proxy"  # SA presets.envoy.name
COMPONENT = ENDPOINT_PICKER_COMPONENT
# The pods' labels (routerlib _helpers.tpl selectorLabels and modeLabels, with
# inferencePool.create true, the standalone default).
SELECTOR_LABEL = "llm-d-router-gateway"
MODE_LABEL = ("llm-d.ai/igw-mode", "llm-d-router-gateway")
# The chart truncates the release name to 40 characters (_helpers.tpl llm-d-router.name); we
# refuse a longer one instead, so every name we derive stays a valid label value.
MAX_NAME_LENGTH = 40

EPP_CONFIG_FILE = "config.yaml"
EPP_CONFIG_DIR = "/config"  # routerlib _deployment.yaml plugins-config-volume mountPath
PROXY_CONFIG_FILE = "envoy.yaml"
PROXY_CONFIG_DIR = "/etc/envoy"  # SA presets.envoy.volumeMounts


# --- names ----------------------------------------------------------------------------------


def epp_name_of(server: str) -> str:
    return f"{server}-epp"


def epp_host_of(server: str, namespace: str) -> str:
    return f"{epp_name_of(server)}.{namespace}.svc.cluster.local"


def objective_of(server: str, tier: str) -> str:
    """InferenceObjectives are looked up by name alone in the namespace (LR
    pkg/epp/datastore/datastore.go), so each version's are prefixed with its pool's name."""
    return f"{server}-{tier}"


def epp_selector_of(server: str) -> dict[str, str]:
    """The labels on EPP pods (NetworkPolicy, PDB, PodMonitor, Service, the gateway's subsets)."""
    return {SELECTOR_LABEL: epp_name_of(server)}


def epp_name(plan: EndpointPickerPlan) -> str:
    return epp_name_of(plan.name)


def proxy_config_map_name(plan: EndpointPickerPlan) -> str:
    # The chart names it `envoy` whatever the release (SA presets.envoy.configMap.name), so two
    # versions in one namespace would collide: ours is per version.
    return f"{epp_name(plan)}-envoy"


def objective_name(plan: EndpointPickerPlan, tier: str) -> str:
    return objective_of(plan.name, tier)


def epp_selector(plan: EndpointPickerPlan) -> dict[str, str]:
    return epp_selector_of(plan.name)


# --- labels and metadata --------------------------------------------------------------------


def object_labels(plan: EndpointPickerPlan) -> dict[str, str]:
    return {**plan.labels, LABEL_NAME: epp_name(plan), LABEL_COMPONENT: COMPONENT}


def pod_labels(plan: EndpointPickerPlan) -> dict[str, str]:
    """The standard labels, less any key the servers are selected by: an EPP pod must never
    be picked by the version's Service, DestinationRule subset, InferencePool or PDB."""
    kept = {k: v for k, v in object_labels(plan).items() if k not in plan.server_labels}
    return {**kept, **epp_selector(plan), MODE_LABEL[0]: MODE_LABEL[1]}


def metadata(plan: EndpointPickerPlan, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": plan.namespace, "labels": object_labels(plan)}
