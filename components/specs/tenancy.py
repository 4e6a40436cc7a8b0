"""Tenant isolation objects as plain Kubernetes specs (pure functions).

Quotas are layered so experiments cannot spend production's budget:
- `<tenant>-total`: the tenant's whole budget;
- `<tenant>-production`: pods of class inference-production get the budget minus the
  experiment share, reserved for them;
- `<tenant>-experiment`: pods of class inference-experiment get only the experiment share;
- `<tenant>-unclassified`: pods of any other (or no) class get no GPU at all.
Every GPU resource any pool provides is listed, with 0 where the tenant has none: a resource a
ResourceQuota does not list is not limited. The budgets are the tenant's plan's
(platform_config/tenant_plan.py), which the config checks hold its models' peaks to.

The tenant's network policies are its default deny and what it lets in; where its pods may
connect out is network.py's (`outbound_policies`, the egress Sidecars and ServiceEntries) and egress_gateway.py's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from platform_config.models import TenantConfig
from platform_config.profiles import EXPERIMENT_PRIORITY_CLASS, PRODUCTION_PRIORITY_CLASS
from platform_config.quantity import resource_quantity
from platform_config.tenant_data import ANNOTATION_S3_PREFIXES
from platform_config.tenant_plan import PriorityBudget, TenantPlan

from ..constants import (
    EXPERIMENT_PRIORITY,
    ISTIO_INGRESS_NAMESPACE,
    KNATIVE_SERVING_NAMESPACE,
    LABEL_TENANT,
    MONITORING_NAMESPACE,
    PRODUCTION_PRIORITY,
    gateway_principal,
    standard_labels,
)
from .network import in_namespace, network_policy, outbound_policies

GPU_PREFIXES = ("nvidia.com/",)


def _hard(budget: PriorityBudget) -> dict[str, str]:
    amounts = budget.resources
    hard = {f"requests.{resource}": resource_quantity(resource, amount) for resource, amount in sorted(amounts.items())}
    if "memory" in amounts:
        hard["limits.memory"] = resource_quantity("memory", amounts["memory"])
    if budget.pods is not None:
        hard["pods"] = str(budget.pods)
    return hard


# The tenant's isolation floor, in and out: every other policy only opens traffic up.
DEFAULT_DENY_POLICY = "default-deny-ingress"
DEFAULT_DENY_EGRESS_POLICY = "default-deny-egress"


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
            # What the pack checks the tenant's IAM policies against (platform_config/tenant_data.py).
            "annotations": {ANNOTATION_S3_PREFIXES: json.dumps(tenant.s3_prefixes)},
        },
    }


def resource_quotas(plan: TenantPlan) -> list[dict[str, Any]]:
    """The four quotas above, each stating its budget of the tenant's plan."""
    tenant = plan.tenant
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
        quota("total", _hard(plan.total)),
        quota("production", _hard(plan.production), "In", [PRODUCTION_PRIORITY_CLASS]),
        quota("experiment", _hard(plan.experiment), "In", [EXPERIMENT_PRIORITY_CLASS]),
        quota("unclassified", _hard(plan.unclassified), "NotIn", classes),
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


def network_policies(
    tenant: TenantConfig, ingress: tuple[tuple[str, str], ...], *, hugging_face: bool = False
) -> list[dict[str, Any]]:
    """Deny all ingress and egress by default. In: the namespace itself, the mesh ingress gateway,
    monitoring, and the platform components in the data path of its models' servers (`ingress`:
    (policy name, namespace) pairs their serving backends name, e.g. Knative's). Out: `outbound_policies`, HTTPS
    through the egress gateway, and for the pods that download from Hugging Face where it does (`hugging_face`)
    beyond it."""
    ns = tenant.name

    def from_namespace(source: str) -> list[dict[str, Any]]:
        return [{"from": [in_namespace(source)]}]

    return [
        network_policy(ns, DEFAULT_DENY_POLICY, "Ingress", None),
        network_policy(ns, DEFAULT_DENY_EGRESS_POLICY, "Egress", None),
        network_policy(ns, "allow-same-namespace", "Ingress", [{"from": [{"podSelector": {}}]}]),
        network_policy(ns, "allow-mesh-ingress", "Ingress", from_namespace(ISTIO_INGRESS_NAMESPACE)),
        network_policy(ns, "allow-monitoring", "Ingress", from_namespace(MONITORING_NAMESPACE)),
        *outbound_policies(ns, mesh=True, pickers=True, through_egress_gateway=True, hugging_face=hugging_face),
        *(network_policy(ns, name, "Ingress", from_namespace(source)) for name, source in ingress),
    ]


# What a tenant's groups may do in its namespace: see its workloads, their logs, events and
# autoscaling, and restart a pod (its controller recreates it) through the Eviction API, which
# answers 429 while the pod's disruption budget allows no disruption, never by deleting it
# outright, which ignores the budget. Not Kubernetes' `edit`, which
# reads Secrets (the namespace's Hugging Face token) and execs into pods; no pods/exec, attach,
# portforward or proxy, no serviceaccounts/token, no escalate, bind or impersonate, and no
# creating pods or workloads (a pod could mount the namespace's Secrets or run as its service
# accounts, the weights reader's IAM role with them). The platform (Pulumi) owns the workloads.
_READ = ["get", "list", "watch"]
TENANT_ROLE_RULES: tuple[dict[str, Any], ...] = (
    {
        "apiGroups": [""],
        "resources": [
            "pods",
            "pods/log",
            "services",
            "endpoints",
            "configmaps",
            "events",
            "persistentvolumeclaims",
            "resourcequotas",
            "limitranges",
        ],
        "verbs": _READ,
    },
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    {"apiGroups": ["apps"], "resources": ["deployments", "replicasets"], "verbs": _READ},
    {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": _READ},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": _READ},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": _READ},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": _READ},
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": _READ},
    {"apiGroups": ["serving.knative.dev"], "resources": ["services", "configurations", "revisions", "routes"], "verbs": _READ},
    {"apiGroups": ["networking.istio.io"], "resources": ["destinationrules", "virtualservices"], "verbs": _READ},
    {"apiGroups": ["security.istio.io"], "resources": ["authorizationpolicies", "peerauthentications"], "verbs": _READ},
    {"apiGroups": ["monitoring.coreos.com"], "resources": ["servicemonitors", "podmonitors"], "verbs": _READ},
)


def tenant_role_name(tenant: TenantConfig) -> str:
    return f"{tenant.name}-tenant"


def role(tenant: TenantConfig) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": tenant_role_name(tenant), "namespace": tenant.name, "labels": standard_labels(tenant.name, "rbac")},
        "rules": [dict(rule) for rule in TENANT_ROLE_RULES],
    }


def role_binding(tenant: TenantConfig) -> dict[str, Any] | None:
    if not tenant.groups:
        return None
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": f"{tenant_role_name(tenant)}-members",
            "namespace": tenant.name,
            "labels": standard_labels(tenant.name, "rbac"),
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": tenant_role_name(tenant)},
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


# The mesh identities of platform components in a tenant's data path, by their namespace (the
# namespaces backends name in `ingress`), and the ports each may call (None: any). Knative
# 1.23 (knative/serving knative-v1.23.0 config/core/deployments/activator.yaml and
# autoscaler.yaml, config/core/200-serviceaccount.yaml): the activator runs as `activator` and
# proxies requests; the autoscaler runs as `controller` (with Knative's controller and webhook)
# and only scrapes queue-proxy's autoscaling metrics (pkg/networking/constants.go
# AutoscalingQueueMetricsPort 9090), so it gets that port alone.
DATA_PATH_CALLERS: dict[str, tuple[tuple[str, tuple[int, ...] | None], ...]] = {
    KNATIVE_SERVING_NAMESPACE: (("activator", None), ("controller", (9090,))),
}


def authorization_policy(tenant: TenantConfig, ingress: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """Only the ingress gateway, the tenant's own namespace and the service accounts of the
    platform components in its models' data path (`ingress`: (policy name, namespace) pairs its
    serving backends name; their identities in DATA_PATH_CALLERS) may call its servers. Never a
    whole platform namespace: any pod there could call the servers."""
    rules: list[dict[str, Any]] = [
        {"from": [{"source": {"principals": [gateway_principal()]}}]},
        {"from": [{"source": {"namespaces": [tenant.name]}}]},
    ]
    for _, namespace in ingress:
        for account, ports in DATA_PATH_CALLERS[namespace]:
            rule: dict[str, Any] = {"from": [{"source": {"principals": [f"cluster.local/ns/{namespace}/sa/{account}"]}}]}
            if ports is not None:
                rule["to"] = [{"operation": {"ports": [str(port) for port in ports]}}]
            rules.append(rule)
    return {
        "apiVersion": "security.istio.io/v1",
        "kind": "AuthorizationPolicy",
        "metadata": {
            "name": "allow-gateway-and-namespace",
            "namespace": tenant.name,
            "labels": standard_labels(tenant.name, "mesh-security"),
        },
        "spec": {"action": "ALLOW", "rules": rules},
    }
