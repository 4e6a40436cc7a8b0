"""The ingress gateway verifies tokens and admits only identified callers."""

from __future__ import annotations

from typing import Any

from .kube import (
    AUTHORIZATION_POLICY,
    GATEWAY_LISTENER_PORTS,
    GATEWAY_NAMESPACE,
    GATEWAY_SELECTOR,
    ISTIO_GATEWAY,
    REQUEST_AUTHENTICATION,
    Report,
    get,
    labels_match,
    name_of,
    namespace_of,
)
from .workloads import of_type


def _selects_the_gateway(props: Any) -> bool:
    """A policy of the gateway's namespace whose selector matches the gateway's pods (none: all)."""
    selector = get(props, "spec", "selector", "matchLabels", default={}) or {}
    return namespace_of(props) == GATEWAY_NAMESPACE and labels_match(selector, GATEWAY_SELECTOR)


def _redirect_only(args: Any) -> tuple[set[str], set[str]]:
    """The listener ports (as strings) and hosts of the Gateway servers on the gateway's pods that
    only redirect to HTTPS: what a rule may admit without a token."""
    ports: set[str] = set()
    hosts: set[str] = set()
    for gateway in of_type(args, ISTIO_GATEWAY):
        if not labels_match(get(gateway.props, "spec", "selector", default={}) or {}, GATEWAY_SELECTOR):
            continue
        for server in get(gateway.props, "spec", "servers", default=[]) or []:
            if get(server, "tls", "httpsRedirect"):
                number = get(server, "port", "number")
                ports.add(str(GATEWAY_LISTENER_PORTS.get(number, number)))
                for host in get(server, "hosts", default=[]) or []:
                    hosts |= {host, f"{host}:*"}
    return ports, hosts


def _identified(source: Any) -> bool:
    """A `from` source that names who the caller is: a verified token's principal, or a mesh
    identity (a peer principal)."""
    return bool(get(source, "requestPrincipals")) or bool(get(source, "principals"))


def gateway_requires_a_token(args: Any, report_violation: Report) -> None:
    """The ingress gateway verifies tokens (a RequestAuthentication selects it) and admits only
    identified callers (an ALLOW AuthorizationPolicy selects it, and each of its rules names
    request principals or a mesh identity), except on a listener that only redirects to HTTPS, for
    that server's hosts. A rule that admits anyone elsewhere, a missing ALLOW policy (Istio then
    admits every request) or a missing RequestAuthentication would let requests reach the models
    without a token."""
    if not of_type(args, ISTIO_GATEWAY):
        return
    if not any(_selects_the_gateway(r.props) for r in of_type(args, REQUEST_AUTHENTICATION)):
        report_violation(
            f"no RequestAuthentication in {GATEWAY_NAMESPACE} selects the gateway's pods {GATEWAY_SELECTOR}: tokens would not "
            "be verified; declare one for the issuer (traffic.authentication)",
            None,
        )
    allows = [
        r for r in of_type(args, AUTHORIZATION_POLICY)
        if _selects_the_gateway(r.props) and str(get(r.props, "spec", "action", default="ALLOW")).upper() == "ALLOW"
    ]  # fmt: skip
    if not allows:
        report_violation(
            f"no ALLOW AuthorizationPolicy in {GATEWAY_NAMESPACE} selects the gateway's pods {GATEWAY_SELECTOR}: Istio admits "
            "every request, with a token or without; declare one requiring a request principal",
            None,
        )
    redirect_ports, redirect_hosts = _redirect_only(args)
    for policy in allows:
        where = f"AuthorizationPolicy {GATEWAY_NAMESPACE}/{name_of(policy.props)}"
        for index, rule in enumerate(get(policy.props, "spec", "rules", default=[]) or []):
            sources = [get(entry, "source", default={}) or {} for entry in get(rule, "from", default=[]) or []]
            if sources:
                if not all(_identified(source) for source in sources):
                    report_violation(
                        f"{where} rule {index} admits a source that names no request principal or mesh identity: every "
                        "`from` source of the gateway's ALLOW rules must name requestPrincipals or principals",
                        policy.urn,
                    )
                continue
            operations = [get(entry, "operation", default={}) or {} for entry in get(rule, "to", default=[]) or []]
            scoped = operations and all(
                set(map(str, get(o, "ports", default=[]) or [])) <= redirect_ports
                and get(o, "ports")
                and set(get(o, "hosts", default=[]) or []) <= redirect_hosts
                and get(o, "hosts")
                for o in operations
            )
            if not scoped:
                report_violation(
                    f"{where} rule {index} admits requests without a token (no `from`) beyond the HTTPS-redirect listeners "
                    f"(ports {sorted(redirect_ports) or 'none'}, hosts {sorted(redirect_hosts) or 'none'}): name who may call, "
                    "or limit it to those ports and hosts",
                    policy.urn,
                )
