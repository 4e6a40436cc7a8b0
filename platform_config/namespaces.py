"""The namespaces the platform installs into, and the names a tenant's namespace may not take (`RESERVED_NAMESPACES`):
one name each, which the components install into and the tenants' check refuses."""

from __future__ import annotations

GPU_OPERATOR_NAMESPACE = "gpu-operator"
MONITORING_NAMESPACE = "monitoring"
ISTIO_SYSTEM_NAMESPACE = "istio-system"
KNATIVE_SERVING_NAMESPACE = "knative-serving"
KNATIVE_OPERATOR_NAMESPACE = "knative-operator"
KUBE_SYSTEM_NAMESPACE = "kube-system"
PROMETHEUS_ADAPTER_NAMESPACE = "prometheus-adapter"
KUEUE_NAMESPACE = "kueue-system"
PREPULL_NAMESPACE = "image-prepull"
# Where the weight mirror's Jobs run: outside the tenants' quotas.
MIRROR_NAMESPACE = "model-weights"
# Where the egress gateway runs: the tenants' way out of the cluster (components/egress_gateway.py).
EGRESS_GATEWAY_NAMESPACE = "istio-egress"

# Namespaces the platform itself installs into, and Kubernetes' and Istio's own; a tenant may not take one of these
# names (its quotas, network policies and RBAC would land in a platform namespace, beside the Kueue controller, the
# pre-pull DaemonSet or the weight mirror's Jobs and their S3 role).
RESERVED_NAMESPACES = frozenset(
    {
        "default",
        KUBE_SYSTEM_NAMESPACE,
        "kube-public",
        "kube-node-lease",
        ISTIO_SYSTEM_NAMESPACE,
        "istio-ingress",
        KNATIVE_SERVING_NAMESPACE,
        KNATIVE_OPERATOR_NAMESPACE,
        GPU_OPERATOR_NAMESPACE,
        MONITORING_NAMESPACE,
        PROMETHEUS_ADAPTER_NAMESPACE,
        KUEUE_NAMESPACE,
        PREPULL_NAMESPACE,
        MIRROR_NAMESPACE,
        EGRESS_GATEWAY_NAMESPACE,
    }
)
