"""Tenant egress through the egress gateway (production, part of tenant-egress-by-host): a tenant's NetworkPolicies let
its pods reach no public address, Hugging Face's CDN included (its wildcard hosts, which no gateway can forward, are the
weight mirror's to download from, in the platform's own namespace), and every host its ServiceEntries name goes through
the egress gateway: the namespace's mesh route sends it there wrapped in the mesh's mTLS naming it as SNI, the gateway's
server for it terminates that mTLS, and the gateway's ALLOW AuthorizationPolicies let each tenant through to its own
hosts only (components/specs/egress_gateway.py)."""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from typing import Any, Collection, Iterator, Mapping

from .kube import (
    AUTHORIZATION_POLICY,
    DESTINATION_RULE,
    FACTS,
    ISTIO_GATEWAY,
    SERVICE_ENTRY,
    VIRTUAL_SERVICE,
    Report,
    fqdn,
    get,
    is_list,
    labels_match,
    name_of,
    namespace_of,
    whole_number,
)
from .workloads import of_type

EGRESS = FACTS["egressGateway"]
EGRESS_NAMESPACE: str = EGRESS["namespace"]
EGRESS_HOST: str = EGRESS["host"]
EGRESS_SELECTOR: dict[str, str] = EGRESS["selector"]
EGRESS_PORT: int = EGRESS["port"]
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
# Where a tenant's pods may connect by address: the private ranges and the Pod Identity Agent.
PRIVATE = tuple(ipaddress.ip_network(cidr) for cidr in FACTS["pickerEgressCidrs"])
HTTPS = 443


def _listed(value: Any) -> list[Any]:
    return list(value) if is_list(value) else ([] if value is None else [value])


def _within(cidr: str, allowed: Collection[Any]) -> bool:
    try:
        network = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return False
    return any(network.version == outer.version and network.subnet_of(outer) for outer in allowed)


def egress_through_gateway(args: Any, tenants: Collection[str], named: Mapping[str, set[str]], report_violation: Report) -> None:
    """The checks above, over the tenants' namespaces and the hosts each namespace's ServiceEntries name (`named`)."""
    for policy in of_type(args, NETWORK_POLICY):
        namespace = namespace_of(policy.props)
        if namespace in tenants:
            _check_network_policy(policy, report_violation)
    exact = {ns: {h for h in named.get(ns, ()) if not h.startswith("*")} for ns in tenants}
    _check_routes(args, exact, report_violation)
    _check_gateway(args, exact, report_violation)


def _check_network_policy(policy: Any, report_violation: Report) -> None:
    """Every egress rule names its peers, and reaches by address only the private ranges and the Pod Identity Agent:
    no public address, whatever the port, the pods it selects or the hosts the namespace names (Hugging Face's wildcard
    download hosts, which outside production its downloading pods reach by address, included)."""
    spec = get(policy.props, "spec", default={}) or {}
    if "Egress" not in [str(t) for t in _listed(get(spec, "policyTypes"))]:
        return
    where = f"NetworkPolicy {namespace_of(policy.props)}/{name_of(policy.props)}"
    for rule in _listed(get(spec, "egress")):
        peers = _listed(get(rule, "to"))
        if not peers:
            report_violation(f"{where} lets pods of a tenant's connect anywhere (an egress rule without `to`)", policy.urn)
            continue
        blocks = [get(peer, "ipBlock") for peer in peers if get(peer, "ipBlock") is not None]
        public = [b for b in blocks if not _within(str(get(b, "cidr", default="")), PRIVATE)]
        if public:
            cidrs = ", ".join(str(get(b, "cidr")) for b in public)
            report_violation(
                f"{where} lets pods of a tenant's reach {cidrs} past the egress gateway: in production a tenant's hosts "
                f"go through {EGRESS_HOST}, and only the weight mirror's Jobs download from Hugging Face",
                policy.urn,
            )


def _subset_tls(rule: Any, subset: Any) -> Any:
    """The TLS settings a sidecar uses on the egress gateway's port for a subset of a DestinationRule (istio: a subset's
    port settings, else its own, else the rule's port settings, else the rule's)."""
    for policy in (get(subset, "trafficPolicy"), get(rule, "spec", "trafficPolicy")):
        for port in _listed(get(policy, "portLevelSettings")):
            if whole_number(get(port, "port", "number")) == EGRESS_PORT and get(port, "tls") is not None:
                return get(port, "tls")
        if get(policy, "tls") is not None:
            return get(policy, "tls")
    return None


def _mesh_tls_routes(args: Any, namespace: str) -> Iterator[tuple[Any, Any]]:
    """(VirtualService, tls route) of the namespace's VirtualServices for the mesh's sidecars."""
    for service in of_type(args, VIRTUAL_SERVICE):
        gateways = [str(g) for g in _listed(get(service.props, "spec", "gateways"))]
        if namespace_of(service.props) == namespace and (not gateways or "mesh" in gateways):
            for route in _listed(get(service.props, "spec", "tls")):
                yield service, route


def _check_routes(args: Any, exact: Mapping[str, set[str]], report_violation: Report) -> None:
    """Each exact host goes to the egress gateway, to a subset that wraps it in the mesh's mTLS naming the host."""
    subsets: dict[tuple[str, str], tuple[Any, Any]] = {}
    for rule in of_type(args, DESTINATION_RULE):
        namespace = namespace_of(rule.props)
        if fqdn(str(get(rule.props, "spec", "host", default="")), namespace) == EGRESS_HOST:
            for subset in _listed(get(rule.props, "spec", "subsets")):
                subsets[(namespace, str(get(subset, "name")))] = (rule, subset)
    for namespace, hosts in exact.items():
        routed: dict[str, list[tuple[Any, Any]]] = defaultdict(list)
        for service, route in _mesh_tls_routes(args, namespace):
            for match in _listed(get(route, "match")):
                if whole_number(get(match, "port")) in (None, HTTPS):
                    for host in _listed(get(match, "sniHosts")):
                        routed[str(host)].append((service, route))
        for host in sorted(hosts):
            if not routed.get(host):
                report_violation(
                    f"{namespace}: no VirtualService of the namespace sends {host} to the egress gateway, so its sidecars "
                    "connect to it directly, past the gateway's authorization",
                    _urn_of_entry(args, namespace, host),
                )
            for service, route in routed.get(host, []):
                _check_destinations(service, route, host, subsets, report_violation)


def _check_destinations(
    service: Any, route: Any, host: str, subsets: Mapping[tuple[str, str], tuple[Any, Any]], report_violation: Report
) -> None:
    namespace = namespace_of(service.props)
    where = f"VirtualService {namespace}/{name_of(service.props)}"
    for destination in (get(r, "destination") for r in _listed(get(route, "route"))):
        target = fqdn(str(get(destination, "host", default="")), namespace)
        if target != EGRESS_HOST:
            report_violation(f"{where} sends {host} to {target}, not to the egress gateway {EGRESS_HOST}", service.urn)
            continue
        found = subsets.get((namespace, str(get(destination, "subset", default=""))))
        tls = _subset_tls(*found) if found else None
        if get(tls, "mode") != "ISTIO_MUTUAL" or get(tls, "sni") != host:
            report_violation(
                f"{where} sends {host} to the egress gateway's subset {get(destination, 'subset')!r}, whose connections are "
                f"not the mesh's mTLS naming {host} (tls {dict(tls) if isinstance(tls, Mapping) else tls}): the gateway "
                "could not tell whose they are, nor match the host's server",
                (found[0] if found else service).urn,
            )


def _urn_of_entry(args: Any, namespace: str, host: str) -> str | None:
    """The URN of the namespace's ServiceEntry naming `host`."""
    for entry in of_type(args, SERVICE_ENTRY):
        if namespace_of(entry.props) == namespace and host in [str(h) for h in _listed(get(entry.props, "spec", "hosts"))]:
            return str(entry.urn)
    return None


def _applies_to_gateway(props: Mapping[str, Any], selector_path: tuple[str, ...]) -> bool:
    selector = get(props, *selector_path)
    return namespace_of(props) == EGRESS_NAMESPACE and (not selector or labels_match(selector, EGRESS_SELECTOR))


def _check_gateway(args: Any, exact: Mapping[str, set[str]], report_violation: Report) -> None:
    """The gateway's servers for the tenants' hosts terminate the mesh's mTLS, and its ALLOW AuthorizationPolicies grant
    tenants' namespaces their own hosts only."""
    tenant_hosts = set().union(*exact.values()) if exact else set()
    for gateway in of_type(args, ISTIO_GATEWAY):
        if not _applies_to_gateway(gateway.props, ("spec", "selector")) or not get(gateway.props, "spec", "selector"):
            continue
        for server in _listed(get(gateway.props, "spec", "servers")):
            hosts = {str(h).split("/", 1)[-1] for h in _listed(get(server, "hosts"))}
            mode = get(server, "tls", "mode")
            if hosts & tenant_hosts and mode != "ISTIO_MUTUAL":
                report_violation(
                    f"Gateway {EGRESS_NAMESPACE}/{name_of(gateway.props)} serves {', '.join(sorted(hosts & tenant_hosts))} "
                    f"with TLS mode {mode}: only ISTIO_MUTUAL lets the gateway tell whose a connection is",
                    gateway.urn,
                )
    allowing = [
        p
        for p in of_type(args, AUTHORIZATION_POLICY)
        if _applies_to_gateway(p.props, ("spec", "selector", "matchLabels"))
        and str(get(p.props, "spec", "action", default="ALLOW")).upper() == "ALLOW"
    ]
    if tenant_hosts and not allowing:
        report_violation(
            f"no ALLOW AuthorizationPolicy in {EGRESS_NAMESPACE} selects the egress gateway's pods {EGRESS_SELECTOR}: "
            "Istio lets every workload through to every host it forwards",
            None,
        )
    for policy in allowing:
        for rule in _listed(get(policy.props, "spec", "rules")):
            problem = _rule_problem(rule, exact)
            if problem:
                report_violation(f"AuthorizationPolicy {EGRESS_NAMESPACE}/{name_of(policy.props)}: {problem}", policy.urn)


def _rule_problem(rule: Any, exact: Mapping[str, set[str]]) -> str:
    """What is wrong with an ALLOW rule on the egress gateway ("" if nothing): it must name tenants' namespaces as its
    only sources and the hosts by `connection.sni`, each among every one of those tenants' own."""
    sources = [get(f, "source", default={}) or {} for f in _listed(get(rule, "from"))]
    namespaces = [str(n) for s in sources for n in _listed(get(s, "namespaces"))]
    if not sources or any(set(s) != {"namespaces"} or not _listed(get(s, "namespaces")) for s in sources):
        return "a rule whose sources are not tenants' namespaces alone lets other workloads through"
    strangers = sorted(set(namespaces) - set(exact))
    if strangers:
        return f"it lets {', '.join(strangers)} through, which is no tenant's namespace"
    conditions = [c for c in _listed(get(rule, "when")) if get(c, "key") == "connection.sni"]
    snis = {str(v) for c in conditions for v in _listed(get(c, "values"))}
    if not conditions or any(get(c, "notValues") for c in conditions) or not snis:
        return "a rule without connection.sni values lets its tenants through to any host the gateway forwards"
    for namespace in sorted(set(namespaces)):
        foreign = sorted(snis - exact[namespace])
        if foreign:
            return f"it lets {namespace} through to {', '.join(foreign)}, which no ServiceEntry of {namespace} names"
    return ""
