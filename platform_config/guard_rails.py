"""Production guard rails: what a change weakens, compared with the stack as it was (pure).

The program exports its security posture (`securityPosture`, from `security_posture`): who may call (the token's
issuer, where its keys come from, its audiences, which claims name the user, tier and tenant, who may force a
version), whether a model answers only its tenant's callers, whether the gateway serves plain HTTP and on which
load balancer, whether the Kubernetes API is public and to whom and who administers the cluster, each model's tenant
and running servers, each tenant's groups and Pod Security level, and whether the stack is production. The preview
compares it with the baseline's (a previous preview's `report.json`, or `pulumi stack output --json` of the deployed
stack: `preview --previous-outputs`), and in a stack that is or was production refuses every weakening the stack file
does not acknowledge by name in `acknowledge` (preview/sections/checks.py guard_rail_section). An acknowledged
weakening is still listed, as a finding.

What removes every server of a model: the model gone (`remove-model`), moved to another tenant (`move-model`: its
servers leave the old tenant's namespace), or none of the versions it ran (`release.stable` and `release.canary`, one
Deployment or Knative Service each) running after the change (`replace-servers`: every server deleted, the model served
only by new ones, which start cold). A tenant's: the tenant gone, or each of its models removed or moved (each named).
What cannot remove them, because the config refuses it (exit 2): `maxReplicas` 0 (at least 1), `minReplicas` 0 in
production (the profiles that serve production traffic never scale to zero, a picked model keeps a replica,
production HPAs keep 2), a stable version at zero replicas (the bounds are the model's, every running version's), a
tenant's quota below what its models and batch jobs hold at their peak (the quota checks)."""

from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .models import ACKNOWLEDGED_KINDS, ACKNOWLEDGED_SCOPED_KINDS, PlatformConfig
from .s3_locations import s3_within, whole_segments
from .serving import running_versions

# The names that acknowledge each kind of weakening (`acknowledge`).
(
    WEAKEN_AUTHENTICATION,
    DISABLE_TENANT_SCOPING,
    PLAIN_HTTP_INTERNET_FACING,
    PLAIN_HTTP_INTERNAL,
    PUBLIC_API_ENDPOINT,
    WIDEN_CLUSTER_ADMINS,
    LEAVE_PRODUCTION,
    CHANGE_WEIGHT_MIRROR,
) = ACKNOWLEDGED_KINDS
(
    REMOVE_MODEL,
    REMOVE_TENANT,
    WIDEN_CALLERS,
    MOVE_MODEL,
    REPLACE_SERVERS,
    WIDEN_GROUPS,
    RELAX_POD_SECURITY,
    WIDEN_DATA,
) = ACKNOWLEDGED_SCOPED_KINDS
# A public API endpoint is narrow when every CIDR it admits is at least this long a prefix (a /16 is 65,536
# addresses: an office or a VPN's range, not the internet).
NARROW_PREFIX_LENGTH = 16
# The claims of the verified token the gateway filter reads (components/specs/gateway.py): who the user is (their
# canary bucket, vLLM's user key), their tier (queue, priority, premium) and their tenants (which models answer).
CLAIMS = {"user": "userClaim", "tier": "tierClaim", "tenant": "tenantClaim"}


def jwks_keys(jwks: str | None) -> list[dict[str, str | None]] | None:
    """An inline key set's keys as the posture holds them: each key's `kid` and the SHA-256 of the whole key (its
    members as canonical JSON), so a key changed in any member is another key; None for a key set by URI."""
    if jwks is None:
        return None
    keys = []
    for key in json.loads(jwks)["keys"]:  # a JSON Web Key Set, as traffic.authentication.jwks was checked to hold
        canonical = json.dumps(key, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        kid = key.get("kid")
        keys.append({"kid": kid if isinstance(kid, str) else None, "sha256": hashlib.sha256(canonical.encode()).hexdigest()})
    return sorted(keys, key=lambda k: str(k["sha256"]))


def security_posture(config: PlatformConfig) -> dict[str, Any]:
    """What the guard rails compare, as the program exports it (JSON)."""
    traffic = config.traffic
    auth = traffic.authentication
    eks = config.cluster.eks
    return {
        "issuer": auth.issuer,
        # The keys a token's signature is checked with decide who can mint one the gateway takes, whatever its `iss`
        # (istio/api 1.30.3 security/v1beta1/request_authentication.proto, JWTRule `jwks_uri`, `jwks`: "public key
        # set to validate signature of the JWT").
        "jwksUri": auth.jwks_uri,
        "jwks": jwks_keys(auth.jwks),
        "audiences": sorted(auth.audiences),
        "claims": {"user": auth.user_claim, "tier": auth.tier_claim, "tenant": auth.tenant_claim},
        "versionOverridePrincipals": sorted(auth.version_override_principals),
        "tenantScoped": auth.tenant_claim is not None,
        "plainHttp": traffic.tls_credential_name is None,
        "plainHttpInternetFacing": traffic.load_balancer_scheme == "internet-facing" and traffic.tls_credential_name is None,
        "publicApiEndpoint": None
        if eks is None or not eks.endpoint_public_access
        else sorted(eks.public_access_cidrs) or ["0.0.0.0/0"],
        "clusterAdmins": sorted(eks.admin_principal_arns) if eks is not None else [],
        "models": {
            m.name: {"tenant": m.tenant, "callers": sorted(m.callers), "servers": sorted(running_versions(m))}
            for m in config.models
        },
        "tenants": sorted(t.name for t in config.tenants),
        "tenantGroups": {t.name: sorted(t.groups) for t in config.tenants},
        "podSecurity": {t.name: t.pod_security for t in config.tenants},
        # The S3 prefixes each tenant's pods may be granted (read and write), and the bucket every tenant's servers read
        # their Hugging Face weights from: a new prefix is data of someone's a tenant may reach, another bucket is
        # weights nobody reviewed.
        "tenantData": {t.name: sorted(t.s3_prefixes) for t in config.tenants},
        "weightMirror": None
        if config.weight_mirror is None
        else {"bucket": config.weight_mirror.bucket, "create": config.weight_mirror.create},
        # This stack's own: whether the rails hold it, and what it acknowledges.
        "production": config.environment == "production",
        "acknowledged": sorted(config.acknowledge),
    }


# --- the posture's shape, where another run wrote it -------------------------------------------------------


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _optional_str(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _keys(value: Any) -> bool:
    return value is None or (
        isinstance(value, list)
        and all(isinstance(k, dict) and isinstance(k.get("sha256"), str) and _optional_str(k.get("kid")) for k in value)
    )


# Each field a posture may hold, what it must be, and what that is called.
_FIELDS: dict[str, tuple[Any, str]] = {
    "issuer": (lambda v: isinstance(v, str), "a string"),
    "jwksUri": (_optional_str, "a string or null"),
    "jwks": (_keys, "null or a list of {kid, sha256}"),
    "audiences": (_strings, "a list of strings"),
    "claims": (lambda v: isinstance(v, dict) and all(_optional_str(c) for c in v.values()), "a mapping of claim names"),
    "versionOverridePrincipals": (_strings, "a list of strings"),
    "tenantScoped": (lambda v: isinstance(v, bool), "true or false"),
    "plainHttp": (lambda v: isinstance(v, bool), "true or false"),
    "plainHttpInternetFacing": (lambda v: isinstance(v, bool), "true or false"),
    "publicApiEndpoint": (lambda v: v is None or _strings(v), "null or a list of CIDRs"),
    "clusterAdmins": (_strings, "a list of strings"),
    "tenants": (_strings, "a list of strings"),
    "tenantGroups": (lambda v: isinstance(v, dict) and all(_strings(g) for g in v.values()), "a mapping of lists of groups"),
    "podSecurity": (lambda v: isinstance(v, dict) and all(isinstance(p, str) for p in v.values()), "a mapping of levels"),
    "tenantData": (lambda v: isinstance(v, dict) and all(_strings(p) for p in v.values()), "a mapping of lists of S3 URIs"),
    "weightMirror": (
        lambda v: v is None or (isinstance(v, dict) and isinstance(v.get("bucket"), str) and isinstance(v.get("create"), bool)),
        "null or {bucket, create}",
    ),
    "production": (lambda v: isinstance(v, bool), "true or false"),
    "acknowledged": (_strings, "a list of strings"),
}
_MODEL_FIELDS: dict[str, tuple[Any, str]] = {
    "tenant": (lambda v: isinstance(v, str), "a string"),
    "callers": (_strings, "a list of strings"),
    "servers": (_strings, "a list of strings"),
}


def posture_problem(posture: Mapping[str, Any]) -> str | None:
    """What is wrong with a posture another run wrote (the baseline's or the deployed stack's), as `<field>: is ...,
    not ...`; None when every field it holds has its shape. A field it lacks is fine (an older program's)."""
    for field, (valid, what) in _FIELDS.items():
        if field in posture and not valid(posture[field]):
            return f"{field}: is {type(posture[field]).__name__}, not {what}"
    models = posture.get("models", {})
    if not isinstance(models, dict):
        return f"models: is {type(models).__name__}, not a mapping of models"
    for name, model in models.items():
        if not isinstance(model, dict):
            return f"models.{name}: is {type(model).__name__}, not a mapping"
        for field, (valid, what) in _MODEL_FIELDS.items():
            if field in model and not valid(model[field]):
                return f"models.{name}.{field}: is {type(model[field]).__name__}, not {what}"
    return None


# --- what a change weakens ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Weakening:
    acknowledgement: str  # the name that acknowledges it in `acknowledge`
    message: str


def _added(before: Any, after: Any) -> list[str]:
    return sorted(set(after or []) - set(before or []))


def _key_source(posture: Mapping[str, Any]) -> str:
    if posture.get("jwksUri") is not None:
        return str(posture["jwksUri"])
    return "the inline key set (jwks)"


def _authentication(before: Mapping[str, Any], after: Mapping[str, Any]) -> Iterator[Weakening]:
    if "issuer" in before and before["issuer"] != after.get("issuer"):
        yield Weakening(WEAKEN_AUTHENTICATION, f"the gateway now accepts tokens of {after.get('issuer')}, not {before['issuer']}")
    if "jwksUri" in before and "jwks" in before:
        if before["jwksUri"] != after.get("jwksUri") or (before["jwks"] is None) != (after.get("jwks") is None):
            yield Weakening(
                WEAKEN_AUTHENTICATION,
                f"the gateway now checks tokens' signatures with the keys of {_key_source(after)}, not {_key_source(before)}",
            )
        elif before["jwks"] is not None:
            known = {k["sha256"] for k in before["jwks"]}
            added = [k for k in after.get("jwks") or [] if k["sha256"] not in known]
            if added:
                named = ", ".join(f"kid {k['kid'] or '(none)'} (sha256 {k['sha256'][:12]})" for k in added)
                yield Weakening(WEAKEN_AUTHENTICATION, f"the inline key set (jwks) signs tokens with new keys: {named}")
    claims_before, claims_after = before.get("claims") or {}, after.get("claims") or {}
    for claim, key in CLAIMS.items():
        old, new = claims_before.get(claim), claims_after.get(claim)
        # A tenant claim going away is tenant scoping off (below); one coming is scoping on.
        if claim in claims_before and old is not None and new is not None and old != new:
            yield Weakening(
                WEAKEN_AUTHENTICATION, f"authentication.{key} is now {new!r}, not {old!r}: another claim decides the {claim}"
            )
    for key, what in (("audiences", "audiences"), ("versionOverridePrincipals", "principals who may force a version")):
        added = _added(before.get(key), after.get(key))
        if key in before and added:
            yield Weakening(WEAKEN_AUTHENTICATION, f"new {what}: {', '.join(added)}")
    if before.get("tenantScoped") is True and after.get("tenantScoped") is False:
        yield Weakening(DISABLE_TENANT_SCOPING, "authentication.tenantClaim is null: any authenticated caller may call any model")


def _transport(before: Mapping[str, Any], after: Mapping[str, Any]) -> Iterator[Weakening]:
    if before.get("plainHttpInternetFacing") is False and after.get("plainHttpInternetFacing") is True:
        yield Weakening(PLAIN_HTTP_INTERNET_FACING, "the internet-facing load balancer serves plain HTTP (no tlsCredentialName)")
    elif before.get("plainHttp") is False and after.get("plainHttp") is True:
        yield Weakening(
            PLAIN_HTTP_INTERNAL,
            "the internal load balancer serves plain HTTP (no tlsCredentialName): tokens and prompts cross the VPC in clear",
        )


def _network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return None


def wider_public_cidrs(before: list[str] | None, after: list[str] | None) -> list[str]:
    """The CIDRs of the public API endpoint `after` that are wider than /NARROW_PREFIX_LENGTH and that no CIDR of
    `before` held (None: the endpoint is private): a narrow one is an office's or a VPN's, a wide one already public
    is not widened again, but a wider one is (a /8 after a /24, the internet after a /8)."""
    held = [n for n in (_network(c) for c in before or []) if n is not None]
    wider = []
    for cidr in after or []:
        network = _network(cidr)
        if network is not None and network.prefixlen >= NARROW_PREFIX_LENGTH:
            continue
        if network is None or not any(h.version == network.version and network.subnet_of(h) for h in held):  # type: ignore[arg-type]
            wider.append(cidr)
    return wider


def _cluster(before: Mapping[str, Any], after: Mapping[str, Any]) -> Iterator[Weakening]:
    wider = wider_public_cidrs(before.get("publicApiEndpoint"), after.get("publicApiEndpoint"))
    if "publicApiEndpoint" in before and wider:
        yield Weakening(
            PUBLIC_API_ENDPOINT,
            f"the Kubernetes API is now public to {', '.join(wider)} (wider than /{NARROW_PREFIX_LENGTH})",
        )
    admins = _added(before.get("clusterAdmins"), after.get("clusterAdmins"))
    if "clusterAdmins" in before and admins:
        yield Weakening(WIDEN_CLUSTER_ADMINS, f"new cluster administrators (EKS access entries): {', '.join(admins)}")


def _models(before: Mapping[str, Any], after: Mapping[str, Any]) -> Iterator[Weakening]:
    models_before, models_after = before.get("models") or {}, after.get("models") or {}
    for model in sorted(models_before):
        old, new = models_before[model], models_after.get(model)
        if new is None:
            yield Weakening(f"{REMOVE_MODEL}:{model}", f"model {model} and every server of it are removed")
            continue
        moved = "tenant" in old and old["tenant"] != new.get("tenant")
        if moved:
            yield Weakening(
                f"{MOVE_MODEL}:{model}",
                f"model {model} moves from tenant {old['tenant']} to {new.get('tenant')}: every server of it leaves "
                f"{old['tenant']}'s namespace, and {new.get('tenant')}'s callers reach it",
            )
        # Who may call it: its tenant and its callers; the tenant it moves to is the move's own finding.
        owners = "tenant" in old and "tenant" in new
        callers = _added(
            [*old.get("callers", []), *([old["tenant"]] if owners else [])],
            [*new.get("callers", []), *([new["tenant"]] if owners and not moved else [])],
        )
        if callers:
            yield Weakening(f"{WIDEN_CALLERS}:{model}", f"model {model} now answers tenants {', '.join(callers)} too")
        servers_before, servers_after = set(old.get("servers") or []), set(new.get("servers") or [])
        if servers_before and servers_after and not servers_before & servers_after:
            yield Weakening(
                f"{REPLACE_SERVERS}:{model}",
                f"every server of model {model} ({', '.join(sorted(servers_before))}) is removed at once: it is served "
                f"only by new ones ({', '.join(sorted(servers_after))}), which start cold",
            )


def _tenants(before: Mapping[str, Any], after: Mapping[str, Any]) -> Iterator[Weakening]:
    for tenant in _added(after.get("tenants"), before.get("tenants")):
        yield Weakening(f"{REMOVE_TENANT}:{tenant}", f"tenant {tenant} and its namespace are removed")
    groups_before, groups_after = before.get("tenantGroups") or {}, after.get("tenantGroups") or {}
    for tenant in sorted(set(groups_before) & set(groups_after)):
        added = _added(groups_before[tenant], groups_after[tenant])
        if added:
            yield Weakening(
                f"{WIDEN_GROUPS}:{tenant}",
                f"tenant {tenant}'s Role (its workloads, logs and events, evicting its pods) is bound to {', '.join(added)} too",
            )
    levels_before, levels_after = before.get("podSecurity") or {}, after.get("podSecurity") or {}
    for tenant in sorted(set(levels_before) & set(levels_after)):
        if levels_before[tenant] == "restricted" and levels_after[tenant] != "restricted":
            yield Weakening(
                f"{RELAX_POD_SECURITY}:{tenant}",
                f"tenant {tenant}'s namespace enforces Pod Security {levels_after[tenant]!r}, not 'restricted'",
            )


def _mirror(value: Mapping[str, Any] | None) -> str:
    if value is None:
        return "no weight mirror"
    return f"bucket {value['bucket']}" + ("" if value["create"] else " (not created by the stack)")


def _held(prefix: str, held: str) -> bool:
    """Whether a prefix the stack held holds `prefix`. One with an empty path segment (`//`), which an older program
    took and granted as the location without it, holds nothing now (s3_parts refuses it): what is under it is new."""
    return whole_segments(prefix) and whole_segments(held) and s3_within(prefix, held)


def _data(before: Mapping[str, Any], after: Mapping[str, Any]) -> Iterator[Weakening]:
    data_before, data_after = before.get("tenantData") or {}, after.get("tenantData") or {}
    for tenant in sorted(set(data_before) & set(data_after)):
        added = [p for p in data_after[tenant] if not any(_held(p, held) for held in data_before[tenant])]
        if added:
            yield Weakening(
                f"{WIDEN_DATA}:{tenant}",
                f"tenant {tenant}'s pods may now be granted reads and writes under {', '.join(added)} too",
            )
    if "weightMirror" in before and before["weightMirror"] is not None and before["weightMirror"] != after.get("weightMirror"):
        yield Weakening(
            CHANGE_WEIGHT_MIRROR,
            f"every tenant's servers now read their Hugging Face weights from {_mirror(after.get('weightMirror'))}, not "
            f"{_mirror(before['weightMirror'])}",
        )


def weakenings(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Weakening]:
    """What `after` weakens of `before` (two `security_posture`s; `before` may come from an older program, so a
    field it lacks is taken as unchanged, and `posture_problem` has held it to its shape)."""
    found = [
        *_authentication(before, after),
        *_transport(before, after),
        *_cluster(before, after),
        *_models(before, after),
        *_tenants(before, after),
        *_data(before, after),
    ]
    if before.get("production") is True and after.get("production") is False:
        found.append(
            Weakening(
                LEAVE_PRODUCTION,
                "the stack is no longer production: the guard rails and production's floors stop holding it after this change",
            )
        )
    return found
