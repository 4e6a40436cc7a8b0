"""The system nodes as the scheduler sees them (`system_scheduling_template`).

The preview's admission stage places every pod template the program renders on the pool its
nodeSelector names, the system node group's included (the endpoint pickers run there). The
controllers below run there too, but from Helm charts and EKS add-ons whose pods the program
never renders: nothing else checks that they fit. Each system node's allocatable is reduced by
an equal share of their requests (SYSTEM_CONTROLLERS, spread over the group's maxSize nodes), so
what is left is what the pickers may take. Counted whether or not the stack installs the
optional ones (Knative, Kueue, prometheus-adapter, kube-prometheus-stack, metrics-server): an
over-reserve never lets a real shortage through. The control plane (istiod, Knative's, the cluster
autoscaler) at the replicas the stack runs of it (`system_controllers`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any, Mapping

from platform_config.capacity import system_node_allocatable
from platform_config.floors import control_plane_replicas
from platform_config.models import PlatformConfig, SystemNodeGroup
from platform_config.quantity import exact_quantity, milli_quantity, parse_quantity

from .constants import PROMETHEUS_URL, SYSTEM_NODE_SELECTOR, SYSTEM_POOL
from .specs.kueue import kueue_values
from .specs.mesh import gateway_values
from .specs.metrics import adapter_values
from .specs.system_charts import metrics_server_values


@dataclass(frozen=True)
class SystemController:
    """Pods of one controller on the system nodes, and what each pod requests."""

    name: str
    pods: int
    requests: Mapping[str, str]
    # Where the figures come from.
    source: str
    # Part of the control plane: `pods` per replica the stack runs of it (production runs more).
    control_plane: bool = False


def _plus(*requests: Mapping[str, str]) -> dict[str, str]:
    """Containers' requests summed into one pod's (as exact Kubernetes quantities: millicores, bytes)."""
    total: dict[str, Decimal] = {}
    for each in requests:
        for resource, text in each.items():
            total[resource] = total.get(resource, Decimal(0)) + parse_quantity(text)
    return {
        resource: milli_quantity(amount) if resource == "cpu" else exact_quantity(amount) for resource, amount in total.items()
    }


# Istio 1.30.3 global.proxy.resources (manifests/charts/istio-control/istio-discovery/values.yaml):
# the sidecar every pod in an injected namespace (knative-serving) gets.
ISTIO_SIDECAR_REQUESTS = {"cpu": "100m", "memory": "128Mi"}
# A pod whose chart sets no requests (and the project neither): a controller's idle footprint,
# rounded up. Not a measurement.
UNSET_REQUESTS_ALLOWANCE = {"cpu": "100m", "memory": "256Mi"}

_GATEWAY = gateway_values(None, "internal")
SYSTEM_CONTROLLERS: tuple[SystemController, ...] = (
    # Requests the project sets.
    SystemController(
        "istio ingress gateway",
        _GATEWAY["autoscaling"]["maxReplicas"],
        _GATEWAY["resources"]["requests"],
        "components/specs/mesh.py gateway_values, at its HPA's maximum: it scales with the traffic that brings the pickers to "
        "their peak",
    ),
    # Requests the charts set, read at the pinned tags; replicas the project sets, else one (the
    # HPAs' minimum: istiod and Knative's scale with config churn and scale-from-zero bursts), the
    # control plane's per replica.
    SystemController(
        "metrics-server",
        metrics_server_values(SYSTEM_NODE_SELECTOR)["replicas"],
        {"cpu": "100m", "memory": "200Mi"},
        "kubernetes-sigs/metrics-server metrics-server-helm-chart-3.13.1 charts/metrics-server/values.yaml resources",
    ),
    SystemController(
        "istiod",
        1,
        {"cpu": "500m", "memory": "2048Mi"},
        "istio/istio 1.30.3 manifests/charts/istio-control/istio-discovery/values.yaml pilot.resources, autoscaleMin 1",
        control_plane=True,
    ),
    SystemController(
        "knative activator (with its sidecar)",
        1,
        _plus({"cpu": "300m", "memory": "60Mi"}, ISTIO_SIDECAR_REQUESTS),
        "knative/serving knative-v1.23.0 config/core/deployments/activator.yaml, activator-hpa.yaml minReplicas 1",
        control_plane=True,
    ),
    SystemController(
        "knative autoscaler, controller and webhook (with their sidecars)",
        3,
        _plus({"cpu": "100m", "memory": "100Mi"}, ISTIO_SIDECAR_REQUESTS),
        "knative/serving knative-v1.23.0 config/core/deployments/{autoscaler,controller,webhook}.yaml",
        control_plane=True,
    ),
    SystemController(
        "net-istio controller (no sidecar)",
        1,
        {"cpu": "30m", "memory": "40Mi"},
        "knative/operator knative-v1.23.0 cmd/operator/kodata/ingress/1.23/istio/net-istio.yaml",
        control_plane=True,
    ),
    SystemController(
        "net-istio webhook (with its sidecar)",
        1,
        _plus({"cpu": "20m", "memory": "20Mi"}, ISTIO_SIDECAR_REQUESTS),
        "knative/operator knative-v1.23.0 cmd/operator/kodata/ingress/1.23/istio/net-istio.yaml",
        control_plane=True,
    ),
    SystemController(
        "kueue controller-manager",
        kueue_values(SYSTEM_NODE_SELECTOR, prometheus=True)["controllerManager"]["replicas"],
        {"cpu": "500m", "memory": "512Mi"},
        "kubernetes-sigs/kueue v0.19.2 charts/kueue/values.yaml controllerManager.manager.resources; replicas "
        "components/specs/kueue.py kueue_values (in every stack)",
    ),
    SystemController(
        "knative operator and its webhook",
        2,
        {"cpu": "100m", "memory": "100Mi"},
        "knative/operator knative-v1.23.0 config/charts/knative-operator/values.yaml",
    ),
    # No requests set by the project or the chart: a fixed allowance.
    SystemController(
        "prometheus-adapter",
        adapter_values(PROMETHEUS_URL)["replicas"],
        UNSET_REQUESTS_ALLOWANCE,
        "replicas: components/specs/metrics.py adapter_values; the chart (5.3.0) sets no requests",
    ),
    SystemController(
        "aws-load-balancer-controller",
        2,
        UNSET_REQUESTS_ALLOWANCE,
        "aws/eks-charts aws-load-balancer-controller 3.5.0 values.yaml: replicaCount 2, resources {}",
    ),
    SystemController(
        "cluster-autoscaler",
        1,
        UNSET_REQUESTS_ALLOWANCE,
        "kubernetes/autoscaler cluster-autoscaler-chart-9.51.0 values.yaml: replicaCount 1, resources {}",
        control_plane=True,
    ),
    SystemController(
        "gpu-operator, NFD master and NFD gc",
        3,
        UNSET_REQUESTS_ALLOWANCE,
        "gpu-operator v25.10.1: its values were not read here",
    ),
    SystemController(
        "kube-prometheus-stack operator, kube-state-metrics, Grafana, Alertmanager",
        4,
        UNSET_REQUESTS_ALLOWANCE,
        "kube-prometheus-stack 81.4.3 (values not read here; it leaves resources empty)",
    ),
    SystemController(
        "Prometheus",
        1,
        {"cpu": "1", "memory": "4Gi"},
        "an allowance for 15 days' retention of the platform's metrics (the chart sets no requests)",
    ),
    # EKS's own, on the same nodes.
    SystemController("CoreDNS", 2, {"cpu": "100m", "memory": "70Mi"}, "the EKS coredns add-on's Deployment"),
)


def system_controllers(control_plane_replicas: int = 1) -> tuple[SystemController, ...]:
    """SYSTEM_CONTROLLERS with the control plane at `control_plane_replicas` each (production's:
    `platform_config.floors.control_plane_replicas`)."""
    return tuple(
        replace(controller, pods=controller.pods * control_plane_replicas) if controller.control_plane else controller
        for controller in SYSTEM_CONTROLLERS
    )


def system_controller_requests(control_plane_replicas: int = 1) -> dict[str, Decimal]:
    """What the system controllers request in all, and the pod slots they take."""
    controllers = system_controllers(control_plane_replicas)
    total: dict[str, Decimal] = {"pods": Decimal(sum(controller.pods for controller in controllers))}
    for controller in controllers:
        for resource, text in controller.requests.items():
            total[resource] = total.get(resource, Decimal(0)) + parse_quantity(text) * controller.pods
    return total


def _rounded(resource: str, amount: Decimal, rounding: str) -> Decimal:
    """CPU to whole millicores, everything else to whole units."""
    step = Decimal("0.001") if resource == "cpu" else Decimal(1)
    return amount.quantize(step, rounding=rounding)


def system_scheduling_template(group: SystemNodeGroup, control_plane_replicas: int = 1) -> dict[str, Any]:
    """One system node as the scheduler sees it, and how many there are at most, in the shape of
    GpuNodePool.scheduling_template (the `nodePools` output): no taints, the kubelet's and node
    agents' reserve (platform_config.capacity), and each node's share of the system controllers, the
    control plane at `control_plane_replicas`."""
    allocatable = system_node_allocatable(group)
    for resource, total in system_controller_requests(control_plane_replicas).items():
        share = _rounded(resource, total / group.max_size, ROUND_CEILING)
        allocatable[resource] = max(Decimal(0), _rounded(resource, allocatable[resource] - share, ROUND_FLOOR))
    return {
        "name": SYSTEM_POOL,
        "labels": dict(SYSTEM_NODE_SELECTOR),
        # The node group declares none (below): any pod may land there.
        "taints": [],
        "allocatable": {resource: exact_quantity(amount) for resource, amount in allocatable.items()},
        "maxSize": group.max_size,
    }


def stack_system_template(config: PlatformConfig) -> dict[str, Any] | None:
    """The stack's system node as the scheduler sees it (`system_scheduling_template`), the control
    plane at the replicas the stack runs of it; None without an EKS system node group."""
    if config.cluster.eks is None:
        return None
    return system_scheduling_template(config.cluster.eks.system_node_group, control_plane_replicas(config.environment) or 1)
