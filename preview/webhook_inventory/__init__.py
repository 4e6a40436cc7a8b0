"""What each installer the platform pins registers with the API server, as read upstream at its
pinned tag: its admission webhooks (failure policy, scope, what they intercept) and the API groups
of the custom resources it defines. The first-`up` stage (preview/first_up.py) holds every object
the program creates against this.

An installer is a Helm chart (by chart name, at the version platform_config/pins.py pins), or a
custom resource an operator reconciles into more objects (KnativeServing), or a file of CRDs. Each
chart's entry is a function of the release's values, following the chart's own template
conditions, cited per file and line at the tag: a webhook the values switch off is not listed, a
failure policy the values pick is the one picked. What an operator registers at runtime (Knative
fills its webhooks' rules when its webhook starts) is cited to the code that does it.

A chart the table does not know is reported as unread, not assumed empty. One module per
installer family (kueue, istio, knative, load_balancer_controller, kube_prometheus_stack), the
shapes they share in shapes.py, the table here.
"""

from __future__ import annotations

from components.inference_extension import INFERENCE_POOL_CRDS_URL, LLM_D_CRDS_URL

from .istio import ISTIO_READ_AT, istio_base, istiod
from .knative import KNATIVE_SERVING_VERSIONS, knative_operator, knative_serving
from .kube_prometheus_stack import kube_prometheus_stack
from .kueue import kueue
from .load_balancer_controller import aws_load_balancer_controller
from .shapes import (
    FAIL,
    IGNORE,
    MUTATING,
    VALIDATING,
    ChartInstaller,
    Installer,
    LabelSelector,
    Rule,
    UnreadValues,
    Webhook,
    no_webhooks,
)

__all__ = [
    "CHARTS",
    "CRD_FILES",
    "FAIL",
    "IGNORE",
    "KNATIVE_SERVING_VERSIONS",
    "MUTATING",
    "VALIDATING",
    "Installer",
    "LabelSelector",
    "Rule",
    "UnreadValues",
    "Webhook",
    "kube_prometheus_stack",
    "knative_serving",
    "kueue",
]

# The CRD files the program applies (components/inference_extension.py), by URL.
CRD_FILES: dict[str, tuple[str, ...]] = {
    INFERENCE_POOL_CRDS_URL: ("inference.networking.k8s.io",),
    LLM_D_CRDS_URL: ("llm-d.ai",),
}


# By chart name (the last segment of an OCI reference): the chart versions read, and what a release
# of one registers. A release of another version is reported as unread: a bump is read again first.
CHARTS: dict[str, tuple[tuple[str, ...], ChartInstaller]] = {
    "base": (("1.30.3",), istio_base),
    "istiod": (("1.30.3",), istiod),
    # manifests/charts/gateway and manifests/charts/istio-cni at 1.30.3: no webhook configuration.
    "gateway": (("1.30.3",), no_webhooks(ISTIO_READ_AT)),
    "cni": (("1.30.3",), no_webhooks(ISTIO_READ_AT)),
    "knative-operator": (("v1.23.0",), knative_operator),
    "kueue": (("0.19.2",), kueue),
    "aws-load-balancer-controller": (("3.5.0",), aws_load_balancer_controller),
    "kube-prometheus-stack": (("81.4.3",), kube_prometheus_stack),
    # deployments/gpu-operator at v25.10.1, its node-feature-discovery 0.18.2 subchart included.
    "gpu-operator": (("v25.10.1",), no_webhooks("NVIDIA/gpu-operator v25.10.1", ("nvidia.com", "nfd.k8s-sigs.io"))),
    # charts/prometheus-adapter at prometheus-adapter-5.3.0: APIServices only.
    "prometheus-adapter": (("5.3.0",), no_webhooks("prometheus-community/helm-charts prometheus-adapter-5.3.0")),
    # charts/metrics-server at metrics-server-helm-chart-3.13.1: the v1beta1.metrics.k8s.io APIService only.
    "metrics-server": (("3.13.1",), no_webhooks("kubernetes-sigs/metrics-server metrics-server-helm-chart-3.13.1")),
    # charts/cluster-autoscaler at cluster-autoscaler-chart-<version>: no webhook configuration.
    "cluster-autoscaler": (
        ("9.37.0", "9.43.1", "9.46.6", "9.51.0", "9.53.0"),
        no_webhooks("kubernetes/autoscaler cluster-autoscaler-chart-9.37.0 to 9.53.0"),
    ),
}
