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

import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from platform_config.capacity import budget_resources, production_budget
from platform_config.models import TenantConfig
from platform_config.profiles import EXPERIMENT_PRIORITY_CLASS, PRODUCTION_PRIORITY_CLASS
from platform_config.tenant_data import ANNOTATION_S3_PREFIXES

from ..constants import (
    BATCH_JOB_COMPONENT,
    ENDPOINT_PICKER_COMPONENT,
    EXPERIMENT_PRIORITY,
    ISTIO_INGRESS_NAMESPACE,
    ISTIO_SYSTEM_NAMESPACE,
    KNATIVE_SERVING_NAMESPACE,
    KUBE_SYSTEM_NAMESPACE,
    LABEL_COMPONENT,
    LABEL_TENANT,
    MODEL_SERVER_COMPONENT,
    MONITORING_NAMESPACE,
    PRODUCTION_PRIORITY,
    gateway_principal,
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


def quantity(resource: str, amount: Decimal) -> str:
    """An amount as a Kubernetes quantity (memory in Gi where whole, CPU in cores or millicores)."""
    return _quantity(resource, amount)


def _hard(amounts: dict[str, Decimal], pods: int | None) -> dict[str, str]:
    hard = {f"requests.{resource}": _quantity(resource, amount) for resource, amount in sorted(amounts.items())}
    if "memory" in amounts:
        hard["limits.memory"] = _quantity("memory", amounts["memory"])
    if pods is not None:
        hard["pods"] = str(pods)
    return hard


# The tenant's isolation floor, in and out: every other policy only opens traffic up.
DEFAULT_DENY_POLICY = "default-deny-ingress"
DEFAULT_DENY_EGRESS_POLICY = "default-deny-egress"

# Where a tenant's pods may connect to. DNS: CoreDNS (EKS and kubeadm keep the `k8s-app:
# kube-dns` label on its pods). The mesh: the `app: istiod` pods' xDS and certificate port
# (15012, istio/istio manifests/charts/istio-control/istio-discovery/templates/service.yaml, the
# sidecars' discovery address). Model downloads: HTTPS anywhere but the instance metadata
# service (IPv4 and the Nitro IPv6 address), so no pod reads the node's credentials even where
# the hop limit would let it. The EKS Pod Identity Agent (the weights reader's credentials)
# answers on the node at 169.254.170.23 / fd00:ec2::23 (EKS user guide, pod-id-agent-setup),
# port 80 (the http://169.254.170.23/v1/credentials URI it injects).
DNS_SELECTOR = {"k8s-app": "kube-dns"}
ISTIOD_SELECTOR = {"app": "istiod"}
ISTIOD_XDS_PORT = 15012
HTTPS_PORT = 443
INSTANCE_METADATA_CIDRS = ("169.254.169.254/32", "fd00:ec2::254/128")
POD_IDENTITY_AGENT_CIDRS = ("169.254.170.23/32", "fd00:ec2::23/128")
POD_IDENTITY_AGENT_PORT = 80


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


def resource_quotas(tenant: TenantConfig, gpu_resources: list[str]) -> list[dict[str, Any]]:
    """The four quotas above; `gpu_resources` are all GPU resource names any pool provides."""
    total = budget_resources(tenant.quota)
    experiment = budget_resources(tenant.experiment_quota)
    production, prod_pods = production_budget(tenant)
    for resource in gpu_resources:
        total.setdefault(resource, Decimal(0))
        experiment.setdefault(resource, Decimal(0))
        production.setdefault(resource, Decimal(0))
    experiment = {r: a for r, a in experiment.items() if r in total}
    exp_pods = tenant.experiment_quota.pods
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


def network_policy(
    namespace: str, name: str, kind: str, rules: list[dict[str, Any]] | None, pods: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A NetworkPolicy over the pods of `namespace` that `pods` selects (every one without it) for `kind` (Ingress
    or Egress); no rules: deny all of it."""
    spec: dict[str, Any] = {"podSelector": pods or {}, "policyTypes": [kind]}
    if rules is not None:
        spec[kind.lower()] = rules
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace, "labels": standard_labels(namespace, "network-policy")},
        "spec": spec,
    }


def _in_namespace(ns: str, pods: dict[str, str] | None = None) -> dict[str, Any]:
    peer: dict[str, Any] = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: ns}}}
    if pods is not None:
        peer["podSelector"] = {"matchLabels": pods}
    return peer


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port} for port in ports]


# The endpoint pickers connect to nothing outside the cluster: to the API server (the `kubernetes`
# Service's endpoints: on EKS the control plane's network interfaces in the cluster's VPC, whose
# private endpoint the platform always enables, components/cluster.py; 443 there, 6443 on most
# clusters of one's own) and to their servers (in the namespace). So their HTTPS stays within the
# private address ranges (RFC 1918, the shared 100.64.0.0/10 EKS custom networking may use, IPv6
# unique local addresses; an IPv6 cluster's global addresses are not among them).
PRIVATE_CIDRS = ("10.0.0.0/8", "100.64.0.0/10", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
API_SERVER_PORTS = (HTTPS_PORT, 6443)
PICKER_PODS = {"matchLabels": {LABEL_COMPONENT: ENDPOINT_PICKER_COMPONENT}}
NOT_PICKER_PODS = {"matchExpressions": [{"key": LABEL_COMPONENT, "operator": "NotIn", "values": [ENDPOINT_PICKER_COMPONENT]}]}


def outbound_policies(namespace: str, *, mesh: bool, pickers: bool = False) -> list[dict[str, Any]]:
    """Where pods of `namespace` may connect to: DNS, istiod where they run the mesh's sidecars (`mesh`), the Pod
    Identity Agent and HTTPS outside the instance metadata service, where it runs endpoint pickers (`pickers`)
    theirs within the private address ranges only, nothing else."""
    policies = [
        network_policy(
            namespace,
            "allow-dns-egress",
            "Egress",
            [{"to": [_in_namespace(KUBE_SYSTEM_NAMESPACE, DNS_SELECTOR)], "ports": [{"protocol": "UDP", "port": 53}, *_tcp(53)]}],
        ),
    ]
    if mesh:
        policies.append(
            network_policy(
                namespace,
                "allow-mesh-egress",
                "Egress",
                [{"to": [_in_namespace(ISTIO_SYSTEM_NAMESPACE, ISTIOD_SELECTOR)], "ports": _tcp(ISTIOD_XDS_PORT)}],
            )
        )
    policies += [
        network_policy(
            namespace,
            "allow-pod-identity-egress",
            "Egress",
            [{"to": [{"ipBlock": {"cidr": cidr}} for cidr in POD_IDENTITY_AGENT_CIDRS], "ports": _tcp(POD_IDENTITY_AGENT_PORT)}],
        ),
        network_policy(
            namespace,
            "allow-https-egress",
            "Egress",
            [
                {
                    "to": [
                        {"ipBlock": {"cidr": "0.0.0.0/0", "except": [INSTANCE_METADATA_CIDRS[0]]}},
                        {"ipBlock": {"cidr": "::/0", "except": [INSTANCE_METADATA_CIDRS[1]]}},
                    ],
                    "ports": _tcp(HTTPS_PORT),
                }
            ],
            NOT_PICKER_PODS if pickers else None,
        ),
    ]
    if pickers:
        policies.append(
            network_policy(
                namespace,
                "allow-picker-api-egress",
                "Egress",
                [{"to": [{"ipBlock": {"cidr": cidr}} for cidr in PRIVATE_CIDRS], "ports": _tcp(*API_SERVER_PORTS)}],
                PICKER_PODS,
            )
        )
    return policies


# Where a tenant's model servers and batch jobs may connect outside the cluster, by host (Istio
# 1.30.3): their sidecar's outbound traffic policy is REGISTRY_ONLY (a connection to a host no Service or
# ServiceEntry it sees names is dropped, not passed through), it sees its own namespace's only
# (egress hosts `./*`: not a ServiceEntry another namespace exports to all), and ServiceEntries
# exported to the namespace alone name what the servers and jobs read and write: their buckets, virtual-hosted on S3's
# regional and global endpoints (the SDKs' style for a bucket name without dots; a dotted one is
# reached path-style, whose hosts serve every bucket), and Hugging Face's API and download hosts
# (huggingface.co, its CDN's *.huggingface.co and *.hf.co, the Xet storage hosts included). TLS on
# 443, resolved by the sidecar itself (DNS for exact hosts, DYNAMIC_DNS for wildcards, which
# pkg/config/validation/validation.go lines 3072-3106 allows for TLS only with wildcard hosts): it
# connects where the host it matched resolves, never where the caller pointed it. This keeps a
# server from reaching what it was not declared to; it is no barrier to code inside it that brings
# its own credentials (a bucket of another account on the same S3 endpoint). The endpoint pickers
# keep ALLOW_ANY: they read the servers' metrics by pod address, which REGISTRY_ONLY would drop.
# The L3 policy stays HTTPS anywhere but the instance metadata service, for the sidecars' own
# connections. The batch pods run the sidecar natively (batch_job.pod_annotations).
# The Sidecar that limits each kind of a tenant's pods that calls out: its model servers and its batch jobs.
EGRESS_SIDECARS = {MODEL_SERVER_COMPONENT: "model-servers-egress", BATCH_JOB_COMPONENT: "batch-jobs-egress"}
HUGGING_FACE_HOSTS = ("huggingface.co",)
HUGGING_FACE_DOWNLOAD_HOSTS = ("*.huggingface.co", "*.hf.co")


def s3_hosts(buckets: Sequence[str], region: str) -> list[str]:
    """The hosts S3 answers the buckets on in `region`: virtual-hosted per bucket, and path style where a
    bucket's name has dots (its virtual host would not match S3's certificate)."""
    hosts = [host for bucket in buckets for host in (f"{bucket}.s3.{region}.amazonaws.com", f"{bucket}.s3.amazonaws.com")]
    return hosts + ([f"s3.{region}.amazonaws.com", "s3.amazonaws.com"] if any("." in b for b in buckets) else [])


def egress_sidecar(tenant: TenantConfig, component: str) -> dict[str, Any]:
    """The sidecar of the namespace's pods of `component` (EGRESS_SIDECARS): outbound only to what its
    namespace's registry names."""
    return {
        "apiVersion": "networking.istio.io/v1",
        "kind": "Sidecar",
        "metadata": {
            "name": EGRESS_SIDECARS[component],
            "namespace": tenant.name,
            "labels": standard_labels(tenant.name, "egress"),
        },
        "spec": {
            "workloadSelector": {"labels": {LABEL_COMPONENT: component}},
            "egress": [{"hosts": ["./*"]}],
            "outboundTrafficPolicy": {"mode": "REGISTRY_ONLY"},
        },
    }


def external_service(namespace: str, name: str, hosts: Any, *, wildcards: bool = False) -> dict[str, Any]:
    """An external destination of the namespace's model servers (`hosts`: a list, or the Output of one; all
    wildcards with `wildcards`, else none)."""
    return {
        "apiVersion": "networking.istio.io/v1",
        "kind": "ServiceEntry",
        "metadata": {"name": name, "namespace": namespace, "labels": standard_labels(namespace, "egress")},
        "spec": {
            "hosts": hosts,
            "exportTo": ["."],
            "location": "MESH_EXTERNAL",
            "ports": [{"number": HTTPS_PORT, "name": "tls", "protocol": "TLS"}],
            "resolution": "DYNAMIC_DNS" if wildcards else "DNS",
        },
    }


def network_policies(tenant: TenantConfig, ingress: tuple[tuple[str, str], ...]) -> list[dict[str, Any]]:
    """Deny all ingress and egress by default. In: the namespace itself, the mesh ingress gateway,
    monitoring, and the platform components in the data path of its models' servers (`ingress`:
    (policy name, namespace) pairs their serving backends name, e.g. Knative's). Out: `outbound_policies`."""
    ns = tenant.name

    def from_namespace(source: str) -> list[dict[str, Any]]:
        return [{"from": [_in_namespace(source)]}]

    return [
        network_policy(ns, DEFAULT_DENY_POLICY, "Ingress", None),
        network_policy(ns, DEFAULT_DENY_EGRESS_POLICY, "Egress", None),
        network_policy(ns, "allow-same-namespace", "Ingress", [{"from": [{"podSelector": {}}]}]),
        network_policy(ns, "allow-mesh-ingress", "Ingress", from_namespace(ISTIO_INGRESS_NAMESPACE)),
        network_policy(ns, "allow-monitoring", "Ingress", from_namespace(MONITORING_NAMESPACE)),
        *outbound_policies(ns, mesh=True, pickers=True),
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
