"""Names, images, ports and chart pins the components share. Change a version here, once."""

from __future__ import annotations

from dataclasses import dataclass

from platform_config.gpu_catalog import GPU_RESOURCE, MIG_RESOURCE_PREFIX, mig_resource

__all__ = ["GPU_RESOURCE", "MIG_RESOURCE_PREFIX", "mig_resource"]

PACKAGE = "inference-platform"

# --- images (pinned: a tag that is a release, never "latest") ------------------------------
# v0.18.0 is the first vLLM release with --shutdown-timeout (drain in-flight requests on SIGTERM).
VLLM_IMAGE = "vllm/vllm-openai:v0.18.0"
AWS_CLI_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.27.50"

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
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
PART_OF = "inference-platform"

LABEL_POOL = "inference.platform/pool"
LABEL_TENANT = "inference.platform/tenant"
LABEL_MODEL = "inference.platform/model"
LABEL_MODEL_VERSION = "inference.platform/model-version"
LABEL_PROFILE = "inference.platform/profile"
LABEL_LATENCY_SENSITIVE = "inference.platform/latency-sensitive"
LABEL_GPU_SHARING = "inference.platform/gpu-sharing"

# Node labels the NVIDIA GPU Operator reads.
NODE_LABEL_MIG_CONFIG = "nvidia.com/mig.config"
NODE_LABEL_DEVICE_PLUGIN_CONFIG = "nvidia.com/device-plugin.config"
NODE_LABEL_DEPLOY_DEVICE_PLUGIN = "nvidia.com/gpu.deploy.device-plugin"

# Every GPU node carries this taint; only pods that tolerate it land there.
GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_TAINT_VALUE = "present"
GPU_TAINT_EFFECT = "NoSchedule"

# --- namespaces the platform installs into --------------------------------------------------
GPU_OPERATOR_NAMESPACE = "gpu-operator"
MONITORING_NAMESPACE = "monitoring"
ISTIO_SYSTEM_NAMESPACE = "istio-system"
# The ingress gateway runs in istio-system, where Knative's knative-local-gateway Service
# (created by net-istio) can select its pods.
ISTIO_INGRESS_NAMESPACE = ISTIO_SYSTEM_NAMESPACE
KNATIVE_SERVING_NAMESPACE = "knative-serving"
KNATIVE_OPERATOR_NAMESPACE = "knative-operator"
KUBE_SYSTEM_NAMESPACE = "kube-system"


@dataclass(frozen=True)
class Chart:
    repo: str
    chart: str
    version: str


# --- Helm charts (pinned) -------------------------------------------------------------------
GPU_OPERATOR_CHART = Chart("https://helm.ngc.nvidia.com/nvidia", "gpu-operator", "v25.10.1")
CLUSTER_AUTOSCALER_CHART = Chart("https://kubernetes.github.io/autoscaler", "cluster-autoscaler", "9.43.1")
PROMETHEUS_STACK_CHART = Chart("https://prometheus-community.github.io/helm-charts", "kube-prometheus-stack", "81.4.5")
PROMETHEUS_ADAPTER_CHART = Chart("https://prometheus-community.github.io/helm-charts", "prometheus-adapter", "5.3.0")
ISTIO_REPO = "https://istio-release.storage.googleapis.com/charts"
ISTIO_VERSION = "1.30.4"
ISTIO_BASE_CHART = Chart(ISTIO_REPO, "base", ISTIO_VERSION)
ISTIO_CNI_CHART = Chart(ISTIO_REPO, "cni", ISTIO_VERSION)
ISTIOD_CHART = Chart(ISTIO_REPO, "istiod", ISTIO_VERSION)
ISTIO_GATEWAY_CHART = Chart(ISTIO_REPO, "gateway", ISTIO_VERSION)
KNATIVE_OPERATOR_CHART = Chart("https://knative.github.io/operator", "knative-operator", "v1.23.0")
KNATIVE_SERVING_VERSION = "1.23"

# Label for namespaces whose pods need host access (device plugins, node agents, exporters).
PRIVILEGED = {"pod-security.kubernetes.io/enforce": "privileged"}

# Priority classes every GPU workload must name.
PRODUCTION_PRIORITY = 1000
EXPERIMENT_PRIORITY = 100


def standard_labels(name: str, component: str, **extra: str) -> dict[str, str]:
    """Recommended Kubernetes labels plus any platform labels."""
    return {LABEL_NAME: name, LABEL_COMPONENT: component, LABEL_PART_OF: PART_OF, **extra}
