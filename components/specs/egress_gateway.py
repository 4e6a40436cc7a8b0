"""The egress gateway (pure builders): the tenants' one way to the hosts they reach by exact name (network.py
`ExternalHost`: their S3 endpoints, Hugging Face's API host), as Istio's "Egress Gateways" task builds it at 1.30.3
with the mesh's mutual TLS between the sidecars and the gateway, so that the gateway knows who connects.

For each such host of a tenant's (istio/istio.io content/en/docs/tasks/traffic-management/egress/egress-gateway,
"Egress gateway for HTTPS traffic", with the mutual TLS of its earlier editions):
- in the tenant's namespace, a VirtualService for the mesh sends a TLS connection whose SNI is the host to the
  gateway's Service, to a subset of its own (`tenant_routes`), and a DestinationRule for the gateway's Service wraps
  it in the mesh's mTLS there, naming the host as SNI (`tenant_gateway_subsets`: `ISTIO_MUTUAL`, `sni`); the caller's
  own TLS runs inside, end to end;
- in the gateway's namespace, a Gateway server per host terminates the mesh's mTLS (`ISTIO_MUTUAL`) on a filter chain
  matching that SNI (istio/istio 1.30.3 pilot/pkg/networking/core/gateway.go createGatewayTCPFilterChainOpts: a TLS
  server that is not passthrough gets `sniHosts` and the TLS context), and a VirtualService of the host's own carries
  the bytes to the host (a `tcp` route; buildGatewayNetworkFiltersFromTCPRoutes takes the first VirtualService whose
  hosts match the server's and the first `tcp` route matching the port, whatever its host: hence one VirtualService
  per host), which a ServiceEntry resolves by DNS at the gateway;
- an AuthorizationPolicy per tenant on the gateway allows the tenant's namespace (its workloads' mTLS identities)
  only its own hosts (`connection.sni`, pilot/pkg/security/authz/model/model.go), over one that allows nothing, so
  a host no tenant is granted is refused.
Istio's API names the three server modes this chooses among (istio/api 1.30.3 networking/v1alpha3/gateway.proto
ServerTLSSettings.TLSmode): PASSTHROUGH would route by the caller's own SNI but leave the gateway blind to who calls;
AUTO_PASSTHROUGH serves mesh-internal SNI-DNAT clusters only (gateway.go builtAutoPassthroughFilterChains skips
MESH_EXTERNAL services). Wildcard hosts do not go through it (network.py says why).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..constants import (
    EGRESS_GATEWAY_HOST,
    EGRESS_GATEWAY_NAME,
    EGRESS_GATEWAY_NAMESPACE,
    EGRESS_GATEWAY_PORT,
    EGRESS_GATEWAY_SELECTOR,
    standard_labels,
)
from .network import HTTPS_PORT, network_policy, outbound_policies
from .pod_parts import node_spread

COMPONENT = "egress"
# The Gateway object whose servers the hosts are, in the gateway's namespace.
GATEWAY = "egress-gateway"
# The tenant-side objects, one each in a tenant's namespace.
TENANT_ROUTES = "egress-through-gateway"
TENANT_SUBSETS = "egress-gateway"
# The pods' resources: Envoy forwarding TLS bytes, no HTTP filters (the chart's limits.cpu dropped for the reason the
# ingress gateway's is, components/mesh.py GATEWAY_RESOURCES).
RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "", "memory": "512Mi"}}
MAX_REPLICAS = 5


@dataclass(frozen=True)
class EgressRoute:
    """One exact host at its region: the ExternalHost's key, and the host."""

    key: str
    host: str


def egress_gateway_values(replicas: int, *, spread: bool, node_selector: Mapping[str, str] | None) -> dict[str, Any]:
    """The gateway chart's values for the egress gateway: a ClusterIP Service (the chart's default ports, 443 the one
    used), autoscaled from `replicas`, on the system nodes where there are (`node_selector`), one pod per node in
    production (`spread`; its disruption budget is the platform's own, egress_gateway_disruption_budget). Keys read at
    istio/istio 1.30.3 manifests/charts/gateway (values.yaml, templates/deployment.yaml, service.yaml, hpa.yaml)."""
    values: dict[str, Any] = {
        "labels": {**EGRESS_GATEWAY_SELECTOR, "app": EGRESS_GATEWAY_NAME},
        "service": {"type": "ClusterIP"},
        "autoscaling": {"enabled": True, "minReplicas": replicas, "maxReplicas": max(replicas, MAX_REPLICAS)},
        "resources": RESOURCES,
    }
    if node_selector:
        values["nodeSelector"] = dict(node_selector)
    if spread:
        values["topologySpreadConstraints"] = node_spread(EGRESS_GATEWAY_SELECTOR, required=True)
    return values


def egress_gateway_namespace() -> dict[str, Any]:
    """The gateway's namespace: Pod Security baseline enforced (the chart's pods set the sysctl
    net.ipv4.ip_unprivileged_port_start, one of baseline's safe ones, as the pack's pod_security.SAFE_SYSCTLS lists
    them; istio 1.30.3's gateway injection template, manifests/charts/istio-control/istio-discovery/files/
    gateway-injection-template.yaml, sets no seccomp profile, which restricted would require)."""
    labels = {
        **standard_labels(EGRESS_GATEWAY_NAMESPACE, COMPONENT),
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/warn": "restricted",
    }
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": EGRESS_GATEWAY_NAMESPACE, "labels": labels}}


def egress_gateway_network_policies() -> list[dict[str, Any]]:
    """Out: DNS (the ServiceEntries it resolves), istiod, and HTTPS anywhere but the instance metadata service: the
    platform's way out for the tenants, held to their hosts by its AuthorizationPolicies, not by address."""
    return [
        network_policy(EGRESS_GATEWAY_NAMESPACE, "default-deny-egress", "Egress", None),
        *(
            p
            for p in outbound_policies(EGRESS_GATEWAY_NAMESPACE, mesh=True)
            if p["metadata"]["name"] != "allow-pod-identity-egress"
        ),
    ]


def egress_gateway_disruption_budget() -> dict[str, Any]:
    """A drain keeps an egress gateway pod up (production), as gateway_disruption_budget does the ingress gateway's."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": EGRESS_GATEWAY_NAME,
            "namespace": EGRESS_GATEWAY_NAMESPACE,
            "labels": standard_labels(EGRESS_GATEWAY_NAME, COMPONENT),
        },
        "spec": {"minAvailable": 1, "selector": {"matchLabels": dict(EGRESS_GATEWAY_SELECTOR)}},
    }


def _istio(kind: str, name: str, namespace: str, spec: dict[str, Any], group: str = "networking") -> dict[str, Any]:
    return {
        "apiVersion": f"{group}.istio.io/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "labels": standard_labels(name, COMPONENT)},
        "spec": spec,
    }


# --- in a tenant's namespace --------------------------------------------------------------------


def tenant_routes(namespace: str, routes: Sequence[EgressRoute]) -> dict[str, Any]:
    """The tenant's sidecars send a TLS connection to each host to the egress gateway, to the host's subset."""
    tls = [
        {
            "match": [{"port": HTTPS_PORT, "sniHosts": [route.host]}],
            "route": [
                {"destination": {"host": EGRESS_GATEWAY_HOST, "subset": route.key, "port": {"number": EGRESS_GATEWAY_PORT}}}
            ],
        }
        for route in routes
    ]
    spec = {"hosts": [route.host for route in routes], "gateways": ["mesh"], "exportTo": ["."], "tls": tls}
    return _istio("VirtualService", TENANT_ROUTES, namespace, spec)


def tenant_gateway_subsets(namespace: str, routes: Sequence[EgressRoute]) -> dict[str, Any]:
    """The egress gateway as the tenant's sidecars reach it: per host a subset whose connections are the mesh's mTLS
    naming the host as SNI (which the gateway's server for it matches, and its authorization reads)."""
    subsets = [
        {
            "name": route.key,
            "trafficPolicy": {
                "portLevelSettings": [
                    {"port": {"number": EGRESS_GATEWAY_PORT}, "tls": {"mode": "ISTIO_MUTUAL", "sni": route.host}}
                ]
            },
        }
        for route in routes
    ]
    return _istio(
        "DestinationRule", TENANT_SUBSETS, namespace, {"host": EGRESS_GATEWAY_HOST, "exportTo": ["."], "subsets": subsets}
    )


# --- in the gateway's namespace -------------------------------------------------------------------


def external_hosts(routes: Sequence[EgressRoute]) -> dict[str, Any]:
    """The hosts as the gateway resolves them: by DNS (a gateway's own address is where a sidecar sent the
    connection, so resolution NONE would loop back to it: the task's warning)."""
    spec = {
        "hosts": [route.host for route in routes],
        "exportTo": ["."],
        "location": "MESH_EXTERNAL",
        "ports": [{"number": HTTPS_PORT, "name": "tls", "protocol": "TLS"}],
        "resolution": "DNS",
    }
    return _istio("ServiceEntry", "tenant-hosts", EGRESS_GATEWAY_NAMESPACE, spec)


def gateway(routes: Sequence[EgressRoute]) -> dict[str, Any]:
    """A server per host: the mesh's mTLS terminated on a filter chain matching the host's SNI. Its hosts are this
    namespace's VirtualServices' to bind (`./`); port names are unique in a Gateway (pkg/config/validation/
    validation.go ValidateGateway), a host in one server only (pilot/pkg/model/gateway.go mergeGateways skips a
    server repeating a TLS host on the port)."""
    servers = [
        {
            "port": {"number": EGRESS_GATEWAY_PORT, "name": f"tls-{route.key}", "protocol": "TLS"},
            "hosts": [f"./{route.host}"],
            "tls": {"mode": "ISTIO_MUTUAL"},
        }
        for route in routes
    ]
    return _istio("Gateway", GATEWAY, EGRESS_GATEWAY_NAMESPACE, {"selector": dict(EGRESS_GATEWAY_SELECTOR), "servers": servers})


def forward_route(route: EgressRoute) -> dict[str, Any]:
    """From the gateway's server for the host to the host itself, the caller's TLS inside as it came."""
    spec = {
        "hosts": [route.host],
        "gateways": [GATEWAY],
        "exportTo": ["."],
        "tcp": [
            {
                "match": [{"gateways": [GATEWAY], "port": EGRESS_GATEWAY_PORT}],
                "route": [{"destination": {"host": route.host, "port": {"number": HTTPS_PORT}}}],
            }
        ],
    }
    return _istio("VirtualService", f"forward-{route.key}", EGRESS_GATEWAY_NAMESPACE, spec)


def allow_nothing() -> dict[str, Any]:
    """An ALLOW policy with no rules: with it, the gateway passes only what another ALLOW policy names."""
    spec = {"selector": {"matchLabels": dict(EGRESS_GATEWAY_SELECTOR)}, "action": "ALLOW"}
    return _istio("AuthorizationPolicy", "allow-nothing", EGRESS_GATEWAY_NAMESPACE, spec, group="security")


def tenant_authorization(tenant: str, hosts: Sequence[str]) -> dict[str, Any]:
    """The tenant's workloads (their namespace, from their mTLS identities) through to the tenant's hosts only."""
    rule = {
        "from": [{"source": {"namespaces": [tenant]}}],
        "to": [{"operation": {"ports": [str(EGRESS_GATEWAY_PORT)]}}],
        "when": [{"key": "connection.sni", "values": list(hosts)}],
    }
    spec = {"selector": {"matchLabels": dict(EGRESS_GATEWAY_SELECTOR)}, "action": "ALLOW", "rules": [rule]}
    return _istio("AuthorizationPolicy", f"tenant-{tenant}", EGRESS_GATEWAY_NAMESPACE, spec, group="security")
