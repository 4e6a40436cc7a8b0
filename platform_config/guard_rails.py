"""Production guard rails: what a change weakens, compared with the stack as it was (pure).

The program exports its security posture (`securityPosture`, from `security_posture`): who may call (the token's
issuer and audiences, who may force a version), whether a model answers only its tenant's callers, whether the
gateway serves plain HTTP on an internet-facing load balancer, whether the Kubernetes API is public and to whom,
and which models and tenants exist. The preview compares it with the baseline's (a previous preview's
`report.json`, or `pulumi stack output --json` of the deployed stack: `preview --previous-outputs`), and in a
production stack refuses every weakening the stack file does not acknowledge by name in `acknowledge`
(preview/sections/checks.py guard_rail_section). An acknowledged weakening is still listed, as a finding."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .models import ACKNOWLEDGED_KINDS, ACKNOWLEDGED_SCOPED_KINDS, PlatformConfig

# The names that acknowledge each kind of weakening (`acknowledge`).
WEAKEN_AUTHENTICATION, DISABLE_TENANT_SCOPING, PLAIN_HTTP_INTERNET_FACING, PUBLIC_API_ENDPOINT = ACKNOWLEDGED_KINDS
REMOVE_MODEL, REMOVE_TENANT, WIDEN_CALLERS = ACKNOWLEDGED_SCOPED_KINDS
# A public API endpoint is narrow when every CIDR it admits is at least this long a prefix (a /16 is 65,536
# addresses: an office or a VPN's range, not the internet).
NARROW_PREFIX_LENGTH = 16


def security_posture(config: PlatformConfig) -> dict[str, Any]:
    """What the guard rails compare, as the program exports it (JSON)."""
    traffic = config.traffic
    eks = config.cluster.eks
    return {
        "issuer": traffic.authentication.issuer,
        "audiences": sorted(traffic.authentication.audiences),
        "versionOverridePrincipals": sorted(traffic.authentication.version_override_principals),
        "tenantScoped": traffic.authentication.tenant_claim is not None,
        "plainHttpInternetFacing": traffic.load_balancer_scheme == "internet-facing" and traffic.tls_credential_name is None,
        "publicApiEndpoint": None
        if eks is None or not eks.endpoint_public_access
        else sorted(eks.public_access_cidrs) or ["0.0.0.0/0"],
        "models": {m.name: {"tenant": m.tenant, "callers": sorted(m.callers)} for m in config.models},
        "tenants": sorted(t.name for t in config.tenants),
        # This stack's own: whether the rails hold it, and what it acknowledges.
        "production": config.environment == "production",
        "acknowledged": sorted(config.acknowledge),
    }


@dataclass(frozen=True)
class Weakening:
    acknowledgement: str  # the name that acknowledges it in `acknowledge`
    message: str


def _narrow(cidrs: list[str] | None) -> bool:
    if cidrs is None:
        return True
    try:
        return all(ipaddress.ip_network(c, strict=False).prefixlen >= NARROW_PREFIX_LENGTH for c in cidrs)
    except ValueError:
        return False


def _list(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def weakenings(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Weakening]:
    """What `after` weakens of `before` (two `security_posture`s; `before` may come from an older program, so a
    field it lacks is taken as unchanged)."""
    found: list[Weakening] = []
    if "issuer" in before and before.get("issuer") != after.get("issuer"):
        found.append(
            Weakening(WEAKEN_AUTHENTICATION, f"the gateway now accepts tokens of {after.get('issuer')}, not {before['issuer']}")
        )
    for key, what in (("audiences", "audiences"), ("versionOverridePrincipals", "principals who may force a version")):
        added = sorted(set(_list(after.get(key))) - set(_list(before.get(key))))
        if key in before and added:
            found.append(Weakening(WEAKEN_AUTHENTICATION, f"new {what}: {', '.join(added)}"))
    if before.get("tenantScoped") is True and after.get("tenantScoped") is False:
        found.append(
            Weakening(DISABLE_TENANT_SCOPING, "authentication.tenantClaim is null: any authenticated caller may call any model")
        )
    if before.get("plainHttpInternetFacing") is False and after.get("plainHttpInternetFacing") is True:
        found.append(
            Weakening(PLAIN_HTTP_INTERNET_FACING, "the internet-facing load balancer serves plain HTTP (no tlsCredentialName)")
        )
    if "publicApiEndpoint" in before and _narrow(before.get("publicApiEndpoint")) and not _narrow(after.get("publicApiEndpoint")):
        found.append(
            Weakening(
                PUBLIC_API_ENDPOINT,
                f"the Kubernetes API is public to {', '.join(_list(after.get('publicApiEndpoint')))} (wider than "
                f"/{NARROW_PREFIX_LENGTH})",
            )
        )
    models_before, models_after = before.get("models") or {}, after.get("models") or {}
    for model in sorted(models_before):
        if model not in models_after:
            found.append(Weakening(f"{REMOVE_MODEL}:{model}", f"model {model} and every server of it are removed"))
            continue
        added = sorted(set(_list(models_after[model].get("callers"))) - set(_list(models_before[model].get("callers"))))
        if added:
            found.append(Weakening(f"{WIDEN_CALLERS}:{model}", f"model {model} now answers tenants {', '.join(added)} too"))
    for tenant in sorted(set(_list(before.get("tenants"))) - set(_list(after.get("tenants")))):
        found.append(Weakening(f"{REMOVE_TENANT}:{tenant}", f"tenant {tenant} and its namespace are removed"))
    return found
