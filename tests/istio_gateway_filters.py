"""The gateway's HTTP filters as istiod 1.30.3 builds them from the rendered objects, for
tests/istio_gateway.py: RequestAuthentication to jwt_authn, AuthorizationPolicies to RBAC, and the
EnvoyFilter's patches. Each translation names the istiod source it follows (istio/istio at tag 1.30.3)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

JWT_FILTER = "envoy.filters.http.jwt_authn"
RBAC_FILTER = "envoy.filters.http.rbac"
# pilot/pkg/xds/filters/filters.go EnvoyJwtFilterPayload.
JWT_PAYLOAD_KEY = "payload"
SPIFFE_PREFIX = "spiffe://"


def typed(type_name: str, **fields: Any) -> dict[str, Any]:
    return {"@type": f"type.googleapis.com/{type_name}", **fields}


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
