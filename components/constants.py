"""Names, ports, labels and namespaces the components share. Versions live in
`platform_config/pins.py`, the one table of pins."""

from __future__ import annotations

from platform_config.gpu_catalog import GPU_RESOURCE, MIG_RESOURCE_PREFIX, mig_resource
from platform_config.models import SYSTEM_POOL_NAME, PlatformConfig
from platform_config.namespaces import (
    EGRESS_GATEWAY_NAMESPACE,
    GPU_OPERATOR_NAMESPACE,
    ISTIO_SYSTEM_NAMESPACE,
    KNATIVE_OPERATOR_NAMESPACE,
    KNATIVE_SERVING_NAMESPACE,
    KUBE_SYSTEM_NAMESPACE,
    MONITORING_NAMESPACE,
)

__all__ = [
    "EGRESS_GATEWAY_NAMESPACE",
    "GPU_OPERATOR_NAMESPACE",
    "GPU_RESOURCE",
    "ISTIO_SYSTEM_NAMESPACE",
    "KNATIVE_OPERATOR_NAMESPACE",
    "KNATIVE_SERVING_NAMESPACE",
    "KUBE_SYSTEM_NAMESPACE",
    "MIG_RESOURCE_PREFIX",
    "MONITORING_NAMESPACE",
    "mig_resource",
]

PACKAGE = "inference-platform"

# --- ports ----------------------------------------------------------------------------------
VLLM_PORT = 8000
HTTP_PORT_NAME = "http"
GATEWAY_HTTP_PORT = 80
GATEWAY_HTTPS_PORT = 443

# --- label and annotation keys --------------------------------------------------------------
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_VERSION = "app.kubernetes.io/version"
LABEL_COMPONENT = "app.kubernetes.io/component"
# The component label of the endpoint pickers' Deployments and pods.
ENDPOINT_PICKER_COMPONENT = "endpoint-picker"
# ... and of the model servers' pods.
MODEL_SERVER_COMPONENT = "model-server"
# ... and of the batch jobs' pods.
BATCH_JOB_COMPONENT = "batch-job"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
PART_OF = "inference-platform"

LABEL_POOL = "inference.platform/pool"
# The EKS system node group's pool label: where the platform's own controllers run.
SYSTEM_POOL = SYSTEM_POOL_NAME
SYSTEM_NODE_SELECTOR = {LABEL_POOL: SYSTEM_POOL}
LABEL_TENANT = "inference.platform/tenant"
LABEL_MODEL = "inference.platform/model"
LABEL_MODEL_VERSION = "inference.platform/model-version"
LABEL_PROFILE = "inference.platform/profile"
LABEL_LATENCY_SENSITIVE = "inference.platform/latency-sensitive"
LABEL_GPU_SHARING = "inference.platform/gpu-sharing"
# pulumi-kubernetes (4.18+): what to await on a resource it has no built-in readiness check for.
PULUMI_WAIT_FOR = "pulumi.com/waitFor"

# The label the cluster autoscaler's AWS provider reads to know a node has GPUs.
NODE_LABEL_ACCELERATOR = "k8s.amazonaws.com/accelerator"

# Node labels the NVIDIA GPU Operator reads.
NODE_LABEL_MIG_CONFIG = "nvidia.com/mig.config"
NODE_LABEL_DEVICE_PLUGIN_CONFIG = "nvidia.com/device-plugin.config"
NODE_LABEL_DEPLOY_DEVICE_PLUGIN = "nvidia.com/gpu.deploy.device-plugin"

# Every GPU node carries this taint; only pods that tolerate it land there.
GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_TAINT_VALUE = "present"
GPU_TAINT_EFFECT = "NoSchedule"

# The ingress gateway's pods (istio's gateway chart labels them so); Knative's local gateway
# Service selects the same pods.
GATEWAY_SELECTOR = {"istio": "ingressgateway"}
GATEWAY_SERVICE_ACCOUNT = "istio-ingressgateway"
# The port each Gateway server port is served on in the gateway's pods: the chart Service's
# targetPort for that port (istio/istio 1.30.3 manifests/charts/gateway/values.yaml
# service.ports: 80 -> 80, 443 -> 443; istiod binds a server to its Service targetPort,
# pilot/pkg/model/gateway.go resolvePorts). Authorization `ports` and EnvoyFilter `portNumber`
# match these listener ports.
GATEWAY_LISTENER_PORTS = {80: 80, 443: 443}
# Knative's local gateway on the same pods: net-istio's knative-local-gateway Gateway serves port
# 8081, behind the Service knative-local-gateway.istio-system port 80 (net-istio's manifests as
# the Knative operator v1.23.0 bundles them, cmd/operator/kodata/ingress/1.23/istio/net-istio.yaml;
# the Service's disable-gateway-port-translation label keeps 8081 as the listener port). The
# gateway sends Knative-served versions there, so their requests pass these pods twice.
KNATIVE_LOCAL_GATEWAY_LISTENER_PORT = 8081

# The egress gateway: the same pinned gateway chart installed a second time, in its own namespace
# (components/egress_gateway.py). Its release name names its Deployment, Service and service
# account, and its pods' selector labels (istio/istio 1.30.3 manifests/charts/gateway/templates/
# _helpers.tpl "gateway.selectorLabels": `app` the name, `istio` the name less "istio-").
EGRESS_GATEWAY_NAME = "istio-egressgateway"
EGRESS_GATEWAY_SELECTOR = {"istio": "egressgateway"}
EGRESS_GATEWAY_HOST = f"{EGRESS_GATEWAY_NAME}.{EGRESS_GATEWAY_NAMESPACE}.svc.cluster.local"
# The Service port the tenants' sidecars send to, and the pods' port behind it, which a
# NetworkPolicy sees after the Service's DNAT: the chart's `https` Service port 443 has
# targetPort 443 (values.yaml service.ports at 1.30.3; its pods may bind it, the chart's pod
# securityContext sets net.ipv4.ip_unprivileged_port_start to 0, templates/deployment.yaml).
# istiod binds a Gateway server to its Service port's targetPort (pilot/pkg/model/gateway.go
# resolvePorts), so the listener is on 443 too.
EGRESS_GATEWAY_PORT = 443
EGRESS_GATEWAY_LISTENER_PORT = 443

# --- namespaces the platform installs into (named in platform_config/namespaces.py) -----------
# The ingress gateway runs in istio-system, where Knative's knative-local-gateway Service
# (created by net-istio) can select its pods.
ISTIO_INGRESS_NAMESPACE = ISTIO_SYSTEM_NAMESPACE

# Knative's activator sits in the data path of a Knative revision while no replica is ready
# (scale from zero, see TARGET_BURST_CAPACITY) and drains for terminationGracePeriodSeconds: 600 (knative/serving knative-v1.23.0
# config/core/deployments/activator.yaml: "should be at least as large as the upper bound on the
# Revision's timeoutSeconds"). The operator's KnativeServing cannot change it (its
# spec.workloads overrides have no terminationGracePeriodSeconds: knative/operator
# knative-v1.23.0 pkg/apis/operator/base/common.go WorkloadOverride), so no Knative-served
# request may be allowed longer.
KNATIVE_ACTIVATOR_GRACE_SECONDS = 600


# Label for namespaces whose pods need host access (device plugins, node agents, exporters).
PRIVILEGED = {"pod-security.kubernetes.io/enforce": "privileged"}

# Priority classes every GPU workload must name.
PRODUCTION_PRIORITY = 1000
EXPERIMENT_PRIORITY = 100


def gateway_principal() -> str:
    """The ingress gateway's mesh identity (its service account's SPIFFE principal)."""
    return f"cluster.local/ns/{ISTIO_INGRESS_NAMESPACE}/sa/{GATEWAY_SERVICE_ACCOUNT}"


def standard_labels(name: str, component: str, **extra: str) -> dict[str, str]:
    """Recommended Kubernetes labels plus any platform labels."""
    return {LABEL_NAME: name, LABEL_COMPONENT: component, LABEL_PART_OF: PART_OF, **extra}


# API groups Kubernetes itself serves (1.30 to 1.34): a kind in any other is a custom resource.
KUBERNETES_API_GROUPS = frozenset(
    {
        "",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "apps",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "resource.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
    }
)

# The Prometheus Operator's governing Service for every Prometheus it runs: a stable name.
PROMETHEUS_URL = f"http://prometheus-operated.{MONITORING_NAMESPACE}.svc"

# Tags naming whose a role is (policies/inference_governance/tenant_s3.py tenant_s3_scoping).
TAG_TENANT = "inference.platform/tenant"
TAG_MIRROR_FOR = "inference.platform/weight-mirror-for"


def aws_tags(config: PlatformConfig) -> dict[str, str]:
    """The tags every AWS resource of the stack carries: its cluster and environment, and who manages it."""
    return {
        "inference.platform/cluster": config.cluster.name,
        "inference.platform/environment": config.environment,
        "managed-by": "pulumi",
    }
