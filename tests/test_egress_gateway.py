"""The egress gateway (issue 27): every host a tenant's workloads reach by exact name goes through it, wrapped in the
mesh's mTLS naming the host, each tenant let through to its own hosts only; the gateway is the pinned gateway chart
again, ClusterIP, on the system nodes, held up like the ingress gateway in production."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from components.specs.network import ExternalHost, exact_hosts, s3_hosts

from .helpers import Evaluated, downloading_weights, prod_with_labeller_server, raw_stack

EGRESS_NAMESPACE = "istio-egress"
EGRESS_HOST = "istio-egressgateway.istio-egress.svc.cluster.local"
RELEASE = "kubernetes:helm.sh/v3:Release"


def _by_kind(manifests: list[dict], kind: str, namespace: str | None = None) -> list[dict]:
    return [m for m in manifests if m["kind"] == kind and namespace in (None, m["metadata"].get("namespace"))]


@pytest.mark.parametrize("stack", ["dev", "staging", "prod", "prod-downloading"])
def test_every_exact_host_goes_through_the_egress_gateway_as_its_tenant(stack: str) -> None:
    """For each host a tenant's ServiceEntries name exactly: the tenant's mesh route sends it to a subset of the egress
    gateway that wraps it in the mesh's mTLS naming the host; the gateway has a server for that SNI terminating the
    mesh's mTLS, a VirtualService of the host's own carrying it on, resolved by DNS; and the gateway lets the tenant's
    namespace through to it. No tenant is let through to a host its own ServiceEntries do not name, and a host no
    tenant names has no server."""
    raw = downloading_weights(prod_with_labeller_server()) if stack == "prod-downloading" else raw_stack(stack)
    manifests = Evaluated(raw, shared=True).manifests()
    exact: dict[str, set[str]] = defaultdict(set)
    for entry in _by_kind(manifests, "ServiceEntry"):
        if entry["metadata"]["namespace"] != EGRESS_NAMESPACE:
            exact[entry["metadata"]["namespace"]] |= {h for h in entry["spec"]["hosts"] if not h.startswith("*")}
    assert any(exact.values())
    (gateway,) = _by_kind(manifests, "Gateway", EGRESS_NAMESPACE)
    servers = {server["hosts"][0].removeprefix("./"): server for server in gateway["spec"]["servers"]}
    assert len({s["port"]["name"] for s in gateway["spec"]["servers"]}) == len(servers) == len(gateway["spec"]["servers"])
    assert set(servers) == set().union(*exact.values())
    forwards = {vs["spec"]["hosts"][0]: vs for vs in _by_kind(manifests, "VirtualService", EGRESS_NAMESPACE)}
    (resolved,) = _by_kind(manifests, "ServiceEntry", EGRESS_NAMESPACE)
    assert resolved["spec"]["resolution"] == "DNS" and set(resolved["spec"]["hosts"]) == set(servers)
    grants = {
        p["metadata"]["name"]: p["spec"]
        for p in _by_kind(manifests, "AuthorizationPolicy", EGRESS_NAMESPACE)
        if p["metadata"]["name"] != "allow-nothing"
    }
    for namespace, hosts in exact.items():
        (routes,) = [vs for vs in _by_kind(manifests, "VirtualService", namespace) if vs["spec"].get("gateways") == ["mesh"]]
        (subsets,) = [dr for dr in _by_kind(manifests, "DestinationRule", namespace) if dr["spec"]["host"] == EGRESS_HOST]
        by_subset = {s["name"]: s["trafficPolicy"]["portLevelSettings"][0] for s in subsets["spec"]["subsets"]}
        (rule,) = grants[f"tenant-{namespace}"]["rules"]
        assert rule["from"] == [{"source": {"namespaces": [namespace]}}]
        assert set(rule["when"][0]["values"]) == hosts and rule["when"][0]["key"] == "connection.sni"
        for host in hosts:
            (route,) = [r for r in routes["spec"]["tls"] if r["match"][0]["sniHosts"] == [host]]
            (destination,) = [r["destination"] for r in route["route"]]
            assert destination["host"] == EGRESS_HOST and destination["port"] == {"number": 443}
            settings = by_subset[destination["subset"]]
            assert settings == {"port": {"number": 443}, "tls": {"mode": "ISTIO_MUTUAL", "sni": host}}
            assert servers[host]["tls"] == {"mode": "ISTIO_MUTUAL"} and servers[host]["port"]["number"] == 443
            (tcp,) = forwards[host]["spec"]["tcp"]
            assert forwards[host]["spec"]["gateways"] == [gateway["metadata"]["name"]]
            assert tcp["route"] == [{"destination": {"host": host, "port": {"number": 443}}}]
    nothing = next(
        p for p in _by_kind(manifests, "AuthorizationPolicy", EGRESS_NAMESPACE) if p["metadata"]["name"] == "allow-nothing"
    )
    assert nothing["spec"] == {"selector": {"matchLabels": {"istio": "egressgateway"}}, "action": "ALLOW"}


def test_hosts_of_like_words_get_keys_of_their_own() -> None:
    """A host's key names its subset, server port and VirtualService: a DNS label, distinct for buckets whose names
    differ only by a dot, and the same for a host at any region."""
    longest = "a." * 30 + "bucket"  # a 66-character name with dots: path style, and a long virtual host
    keys = [h.key for h in exact_hosts(["a.b", "a-b", longest], hugging_face=True)]
    assert len(set(keys)) == len(keys)
    assert all(len(k) <= 63 and k.replace("-", "").isalnum() and k == k.lower() for k in keys)
    assert [h.name("eu-west-1") for h in exact_hosts(["a-b"], hugging_face=False)] == s3_hosts(["a-b"], "eu-west-1")
    assert (
        ExternalHost("x.s3.{region}.amazonaws.com").key == "x-s3-regional-" + ExternalHost("x.s3.{region}.amazonaws.com").key[-8:]
    )


def _release(evaluated: Evaluated, name: str) -> dict[str, Any]:
    return next(r for r in evaluated.records if r.type == RELEASE and r.name == name).outputs


def test_the_egress_gateway_is_the_gateway_chart_behind_a_cluster_ip_on_the_system_nodes() -> None:
    """The pinned gateway chart, ClusterIP (no load balancer), on the EKS system node group; in production two pods at
    least, one per node, behind a disruption budget that selects the chart's pods, like the ingress gateway."""
    prod = Evaluated(raw_stack("prod"), shared=True)
    dev = Evaluated(raw_stack("dev"), shared=True)
    released = _release(prod, "egress-gateway-release")
    assert (released["chart"], released["name"], released["namespace"]) == ("gateway", "istio-egressgateway", EGRESS_NAMESPACE)
    assert released["version"] == _release(prod, "mesh-gateway")["version"]
    values = released["values"]
    assert values["service"] == {"type": "ClusterIP"} and values["nodeSelector"] == {"inference.platform/pool": "system"}
    assert values["autoscaling"]["minReplicas"] == 2 and values["labels"]["istio"] == "egressgateway"
    (spread,) = values["topologySpreadConstraints"]
    assert spread["whenUnsatisfiable"] == "DoNotSchedule" and spread["labelSelector"] == {
        "matchLabels": {"istio": "egressgateway"}
    }
    budget = prod.k8s("PodDisruptionBudget", "istio-egressgateway", EGRESS_NAMESPACE)
    assert budget["spec"] == {"minAvailable": 1, "selector": {"matchLabels": {"istio": "egressgateway"}}}
    small = _release(dev, "egress-gateway-release")["values"]
    assert small["autoscaling"]["minReplicas"] == 1 and "topologySpreadConstraints" not in small and "nodeSelector" not in small
    assert not [
        m for m in dev.manifests() if m["kind"] == "PodDisruptionBudget" and m["metadata"]["namespace"] == EGRESS_NAMESPACE
    ]


def test_the_egress_gateway_alone_reaches_https_anywhere_and_tenant_pods_wait_for_it() -> None:
    """The gateway's namespace reaches DNS, istiod and HTTPS anywhere but the instance metadata service (the
    platform's, not a tenant's); a tenant's servers start only once the gateway and its routes are there."""
    prod = Evaluated(raw_stack("prod"), shared=True)
    policies = {m["metadata"]["name"]: m["spec"] for m in prod.manifests() if m["kind"] == "NetworkPolicy"
                and m["metadata"]["namespace"] == EGRESS_NAMESPACE}  # fmt: skip
    assert set(policies) == {"default-deny-egress", "allow-dns-egress", "allow-mesh-egress", "allow-https-egress"}
    (https,) = policies["allow-https-egress"]["egress"]
    assert [b["ipBlock"] for b in https["to"]] == [
        {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]},
        {"cidr": "::/0", "except": ["fd00:ec2::254/128"]},
    ]
    urns = {r.name: r.urn for r in prod.records}
    server = next(r for r in prod.records if r.name == "llama-70b-v1-deployment")
    assert {urns["egress-gateway-release"], urns["egress-gateway-tenant-serving"], urns["serving-egress-routes"]} <= set(
        server.dependencies
    )
    # Its own tenant's authorization at the gateway, not the other tenants'.
    authorizations = {r.name: r.urn for r in prod.records if r.type.endswith(":AuthorizationPolicy")}
    others = {urn for name, urn in authorizations.items() if name.startswith("egress-gateway-tenant-team-")}
    assert len(others) == 2 and not others & set(server.dependencies)
