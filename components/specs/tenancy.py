"""Tenant isolation objects as plain Kubernetes specs (pure functions).

Quotas are layered so experiments cannot spend production's budget:
- `<tenant>-total`: the tenant's whole budget;
- `<tenant>-production`: pods of class inference-production get the budget minus the
  experiment share, reserved for them;
- `<tenant>-experiment`: pods of class inference-experiment get only the experiment share;
- `<tenant>-unclassified`: pods of any other (or no) class get no GPU at all.
Every GPU resource any pool provides is listed, with 0 where the tenant has none: a resource a
ResourceQuota does not list is not limited.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from platform_config.capacity import budget_resources
from platform_config.models import TenantConfig
from platform_config.profiles import EXPERIMENT_PRIORITY_CLASS, PRODUCTION_PRIORITY_CLASS

from ..constants import (
    EXPERIMENT_PRIORITY,
    GATEWAY_SERVICE_ACCOUNT,
    ISTIO_INGRESS_NAMESPACE,
    LABEL_TENANT,
    MONITORING_NAMESPACE,
    PRODUCTION_PRIORITY,
    standard_labels,
)

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
GPU_PREFIXES = ("nvidia.com/",)


def _quantity(resource: str, amount: Decimal) -> str:
    if resource == "memory":
        gib = amount / 2**30
        return f"{gib.normalize():f}Gi" if gib == gib.to_integral_value() else f"{int(amount)}"
    if resource == "cpu":
        return f"{amount.normalize():f}" if amount == amount.to_integral_value() else f"{int(amount * 1000)}m"
    return f"{int(amount)}"


def _hard(amounts: dict[str, Decimal], pods: int | None) -> dict[str, str]:
    hard = {f"requests.{resource}": _quantity(resource, amount) for resource, amount in sorted(amounts.items())}
    if "memory" in amounts:
        hard["limits.memory"] = _quantity("memory", amounts["memory"])
    if pods is not None:
        hard["pods"] = str(pods)
    return hard


# The tenant's isolation floor: every other policy only opens traffic up.
DEFAULT_DENY_POLICY = "default-deny-ingress"


def namespace(tenant: TenantConfig) -> dict[str, Any]:
    level = tenant.pod_security
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": tenant.name,
            "labels": {
                **standard_labels(tenant.name, "tenant"),
                LABEL_TENANT: tenant.name,
                "istio-injection": "enabled",
                "pod-security.kubernetes.io/enforce": level,
                "pod-security.kubernetes.io/enforce-version": "latest",
                "pod-security.kubernetes.io/warn": "restricted",
                "pod-security.kubernetes.io/audit": "restricted",
            },
        },
    }


def resource_quotas(tenant: TenantConfig, gpu_resources: list[str]) -> list[dict[str, Any]]:
    """The four quotas above; `gpu_resources` are all GPU resource names any pool provides."""
    total = budget_resources(tenant.quota)
    experiment = budget_resources(tenant.experiment_quota)
    for resource in gpu_resources:
        total.setdefault(resource, Decimal(0))
        experiment.setdefault(resource, Decimal(0))
    production = {r: a - experiment.get(r, Decimal(0)) for r, a in total.items()}
    experiment = {r: a for r, a in experiment.items() if r in total}
    exp_pods = tenant.experiment_quota.pods
    prod_pods = None if tenant.quota.pods is None else tenant.quota.pods - (exp_pods or 0)
    classes = [PRODUCTION_PRIORITY_CLASS, EXPERIMENT_PRIORITY_CLASS]

    def quota(
        suffix: str, hard: dict[str, str], operator: str | None = None, values: Sequence[str] | None = None
    ) -> dict[str, Any]:
        spec: dict[str, Any] = {"hard": hard}
        if operator is not None:
            spec["scopeSelector"] = {"matchExpressions": [{"scopeName": "PriorityClass", "operator": operator, "values": values}]}
        return {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {
                "name": f"{tenant.name}-{suffix}",
                "namespace": tenant.name,
                "labels": {**standard_labels(tenant.name, "quota"), LABEL_TENANT: tenant.name},
            },
            "spec": spec,
        }

    return [
        quota("total", _hard(total, tenant.quota.pods)),
        quota("production", _hard(production, prod_pods), "In", [PRODUCTION_PRIORITY_CLASS]),
        quota("experiment", _hard(experiment, exp_pods if exp_pods is not None else 0), "In", [EXPERIMENT_PRIORITY_CLASS]),
        quota("unclassified", _hard({r: Decimal(0) for r in sorted(gpu_resources)}, None), "NotIn", classes),
    ]


def limit_range(tenant: TenantConfig) -> dict[str, Any]:
    """Defaults for containers that say nothing, so every pod counts against the quota.

    No default CPU limit: LimitRanger fills a missing limit from `default` even when the
    container's request is larger (plugin/pkg/admission/limitranger/admission.go,
    mergeContainerResources), and the API server then refuses the pod ("must be less than or
    equal to cpu limit"); model servers request 4-32 CPUs and, on purpose, set no CPU limit. The
    quotas limit CPU requests, which defaultRequest fills. A memory limit stays: the quotas
    limit `limits.memory`, and every container the platform declares sets its own."""
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {
            "name": f"{tenant.name}-defaults",
            "namespace": tenant.name,
            "labels": standard_labels(tenant.name, "limits"),
        },
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "default": {"memory": "1Gi"},
                    "defaultRequest": {"cpu": "100m", "memory": "256Mi"},
                }
            ]
        },
    }


def network_policies(tenant: TenantConfig, ingress: tuple[tuple[str, str], ...]) -> list[dict[str, Any]]:
    """Deny all ingress by default; allow the namespace itself, the mesh ingress gateway,
    monitoring, and the platform components in the data path of its models' servers (`ingress`:
    (policy name, namespace) pairs their serving backends name, e.g. Knative's)."""

    def policy(name: str, ingress: list[dict[str, Any]] | None) -> dict[str, Any]:
        spec: dict[str, Any] = {"podSelector": {}, "policyTypes": ["Ingress"]}
        if ingress is not None:
            spec["ingress"] = ingress
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": tenant.name, "labels": standard_labels(tenant.name, "network-policy")},
            "spec": spec,
        }

    def from_namespace(ns: str) -> list[dict[str, Any]]:
        return [{"from": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: ns}}}]}]

    policies = [
        policy(DEFAULT_DENY_POLICY, None),
        policy("allow-same-namespace", [{"from": [{"podSelector": {}}]}]),
        policy("allow-mesh-ingress", from_namespace(ISTIO_INGRESS_NAMESPACE)),
        policy("allow-monitoring", from_namespace(MONITORING_NAMESPACE)),
    ]
    policies += [policy(name, from_namespace(namespace)) for name, namespace in ingress]
    return policies


def role_binding(tenant: TenantConfig) -> dict[str, Any] | None:
    if not tenant.groups:
        return None
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": f"{tenant.name}-editors", "namespace": tenant.name, "labels": standard_labels(tenant.name, "rbac")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group} for group in tenant.groups],
    }


def priority_classes() -> list[dict[str, Any]]:
    """Production may preempt; experiments are preemptible and never preempt anyone."""
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": PRODUCTION_PRIORITY_CLASS, "labels": standard_labels(PRODUCTION_PRIORITY_CLASS, "scheduling")},
            "value": PRODUCTION_PRIORITY,
            "globalDefault": False,
            "preemptionPolicy": "PreemptLowerPriority",
            "description": "Production inference: may preempt experiments.",
        },
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": EXPERIMENT_PRIORITY_CLASS, "labels": standard_labels(EXPERIMENT_PRIORITY_CLASS, "scheduling")},
            "value": EXPERIMENT_PRIORITY,
            "globalDefault": False,
            "preemptionPolicy": "Never",
            "description": "Experiments and batch work: preemptible, never preempts.",
        },
    ]


# --- isolation -------------------------------------------------------------------------------


def peer_authentication(tenant: TenantConfig) -> dict[str, Any]:
    return {
        "apiVersion": "security.istio.io/v1",
        "kind": "PeerAuthentication",
        "metadata": {"name": "default", "namespace": tenant.name, "labels": standard_labels(tenant.name, "mesh-security")},
        "spec": {"mtls": {"mode": "STRICT"}},
    }


def authorization_policy(tenant: TenantConfig, ingress: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """Only the ingress gateway and the tenant's own namespace may call its servers (and the
    platform components in their data path, `ingress`: (policy name, namespace) pairs its
    models' serving backends name, e.g. Knative's activator)."""
    principals = [f"cluster.local/ns/{ISTIO_INGRESS_NAMESPACE}/sa/{GATEWAY_SERVICE_ACCOUNT}"]
    namespaces = [tenant.name] + [namespace for _, namespace in ingress]
    return {
        "apiVersion": "security.istio.io/v1",
        "kind": "AuthorizationPolicy",
        "metadata": {
            "name": "allow-gateway-and-namespace",
            "namespace": tenant.name,
            "labels": standard_labels(tenant.name, "mesh-security"),
        },
        "spec": {
            "action": "ALLOW",
            "rules": [
                {"from": [{"source": {"principals": principals}}]},
                {"from": [{"source": {"namespaces": namespaces}}]},
            ],
        },
    }
