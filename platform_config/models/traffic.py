"""The gateway: its tiers, hosts, TLS, load balancer and the tokens it accepts."""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from ..profiles import TierName
from .base import (
    _DNS_1123_SUBDOMAIN,
    ConfigModel,
    Duration,
    PositiveInt,
    PositiveQuantity,
    _duration_between,
    _full_match,
    _refuse_retired_keys,
)
from .headers import HeaderName


class TierPolicy(ConfigModel):
    timeout: Duration
    """The longest a request of this tier may take end to end at the gateway (a duration, e.g. `300s`)."""
    max_pending_requests: PositiveInt
    """Requests allowed to wait for a connection per gateway pod and model version before the gateway answers 503."""
    max_requests: PositiveInt
    """Requests in flight per gateway pod and model version."""
    retry_attempts: Annotated[int, Field(ge=0, le=3)]
    """Retries of requests that never reached a server (connect failure, refused stream)."""
    vllm_priority: Annotated[int, Field(ge=0, le=100)]
    """vLLM priority written into the request body for servers that take several tiers (lower is served first)."""
    max_request_body_bytes: Annotated[int, Field(ge=1 << 10, le=64 << 20)] = 4 << 20
    """Largest request body of this tier, in bytes: a larger one gets 413 from the gateway filter (by its
    content-length before the body is read). The gateway buffers up to the largest tier's limit per connection."""
    queue_timeout: Annotated[Duration, _duration_between(1, 600)] = "10s"
    """The longest a request of this tier waits in a model version's endpoint picker queue before the gateway answers
    503 with `Retry-After` (1s-10m), and that `Retry-After`. Each tier waits its own: the picker's proxy times it per
    tier, the picker's own queue TTL is the longest of the tiers its servers take (see the README)."""
    max_queued_requests: Annotated[int, Field(ge=1, le=100_000)] = 256
    """Requests of this tier one endpoint picker replica holds in its queue; past it: 503 with `Retry-After`."""
    max_queued_bytes: PositiveQuantity = "256Mi"
    """Request bytes of this tier one endpoint picker replica holds in its queue; past it: 503 with `Retry-After`."""
    sheddable: bool = False
    """Whether the endpoint picker may drop this tier's queued requests first when the servers are saturated. A
    sheddable tier may not rank above one that is not."""

    @model_validator(mode="before")
    @classmethod
    def _no_retired_keys(cls, data: Any) -> Any:
        return _refuse_retired_keys(
            data,
            {
                "endpointPickerFailure": "a request whose picker cannot be asked always gets 503 with Retry-After. The "
                "picker's proxy streams the request body to the picker (ext_proc FULL_DUPLEX_STREAMED, as llm-d-router "
                "v0.10.0 needs), so once the picker fails Envoy 1.38 holds no body to send on unpicked (see the README, "
                "Endpoint picking and flow control)",
            },
        )


def _default_tiers() -> dict[TierName, TierPolicy]:
    # The route timeout bounds a whole response, streamed ones included, so it must cover a long
    # answer; waiting is bounded by the pending-request limits (503 at once when they are full).
    # Batch stops at 600 s: what Knative's activator drains (KNATIVE_ACTIVATOR_GRACE_SECONDS).
    # Bodies: 4 MiB holds a 128k-token prompt several times over; batch prompts come in lists.
    return {
        "premium": TierPolicy(
            timeout="120s", max_pending_requests=64, max_requests=512, retry_attempts=1, vllm_priority=0, queue_timeout="5s"
        ),
        "standard": TierPolicy(
            timeout="300s", max_pending_requests=32, max_requests=256, retry_attempts=1, vllm_priority=1, queue_timeout="10s"
        ),
        "batch": TierPolicy(
            timeout="600s",
            max_pending_requests=16,
            max_requests=128,
            retry_attempts=0,
            vllm_priority=2,
            max_request_body_bytes=16 << 20,
            queue_timeout="60s",
            max_queued_requests=128,
            max_queued_bytes="512Mi",
            sheddable=True,
        ),
    }


# Hosts as an Istio Gateway and VirtualService take them: `*`, or a DNS name whose first label may
# be `*` (istio/istio 1.30.3 pkg/config/validation/agent/validation.go, ValidateWildcardDomain:
# at most 255 characters, labels of at most 63 letters, digits and '-').
_HOST_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_GATEWAY_HOST = re.compile(rf"\*|(\*\.)?{_HOST_LABEL}(\.{_HOST_LABEL})*")


GatewayHost = Annotated[
    str,
    _full_match(
        _GATEWAY_HOST,
        "is not a gateway host: give a lowercase DNS name such as 'api.example.com', '*.example.com' or '*' (labels of "
        "letters, digits and '-', at most 63 characters each)",
        max_length=253,
    ),
]
SecretName = Annotated[
    str,
    _full_match(
        _DNS_1123_SUBDOMAIN,
        "is not a Secret name: a DNS-1123 subdomain of lowercase letters, digits, '-' and '.', at most 253 characters",
        max_length=253,
    ),
]


def _https_url(value: str) -> str:
    parts = urllib.parse.urlsplit(value) if len(value) <= 2048 and value.isascii() and value.isprintable() else None
    if parts is None or parts.scheme != "https" or not parts.hostname or "@" in parts.netloc or " " in value or parts.fragment:
        raise ValueError(
            f"{value!r} is not an https URL: give 'https://host/path' (no credentials, spaces or fragment), "
            "at most 2048 characters"
        )
    return value


HttpsUrl = Annotated[
    str,
    _full_match(r"https://[!-~]{1,2040}", "is not an https URL of printable ASCII, at most 2048 characters", 2048),
    AfterValidator(_https_url),
]

# Members of a JWK that hold private or shared-secret key material (RFC 7518 sections 6.2.2,
# 6.3.2 and 6.4.1): a gateway needs only public keys, and a config file must not carry secrets.
_PRIVATE_JWK_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})
_PUBLIC_KEY_TYPES = ("RSA", "EC", "OKP")


def _inline_jwks(value: str) -> str:
    if len(value) > 64 << 10:
        raise ValueError("an inline JWKS is at most 64 KiB: publish a larger key set and give 'jwksUri'")
    try:
        document = json.loads(value)
    except ValueError:
        raise ValueError('is not JSON: give a JSON Web Key Set such as \'{"keys": [{"kty": "RSA", ...}]}\'') from None
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list) or not keys or not all(isinstance(key, dict) for key in keys):
        raise ValueError("is not a JSON Web Key Set: give an object whose 'keys' is a non-empty list of keys")
    for index, key in enumerate(keys):
        if key.get("kty") not in _PUBLIC_KEY_TYPES:
            raise ValueError(f"key {index} has kty {key.get('kty')!r}: only public keys ({', '.join(_PUBLIC_KEY_TYPES)})")
        private = sorted(_PRIVATE_JWK_MEMBERS & key.keys())
        if private:
            raise ValueError(f"key {index} holds private key material ({', '.join(private)}): give only the public key")
    return value


# A JSON document: printable ASCII and whitespace (JSON escapes anything else), at most 64 KiB.
InlineJwks = Annotated[
    str,
    _full_match(
        r"[\t\n\r -~]{1,65536}",
        "is not an inline JWKS of ASCII text of at most 64 KiB: publish a larger key set and give 'jwksUri'",
        64 << 10,
    ),
    AfterValidator(_inline_jwks),
]

# A claim name as the gateway filter looks it up in the verified token's payload: printable ASCII
# without spaces, so it is also a valid Lua string literal once JSON-quoted.
ClaimName = Annotated[str, Field(pattern=r"^[!-~]{1,128}$")]
Audience = Annotated[str, Field(pattern=r"^[!-~]{1,512}$")]


class GatewayAuthentication(ConfigModel):
    issuer: HttpsUrl
    """The `iss` of the tokens the gateway accepts (an https URL); a token of any other issuer gets 401."""
    jwks_uri: HttpsUrl | None = None
    """Where the issuer publishes its public keys (an https URL). Give this or `jwks`."""
    jwks: InlineJwks | None = None
    """The issuer's public keys as an inline JSON Web Key Set (no private or shared-secret keys). Give this or
    `jwksUri`."""
    audiences: Annotated[list[Audience], Field(min_length=1)]
    """Audiences (`aud`) a token must name one of: a token minted for another application of the same issuer is
    refused."""
    tier_claim: ClaimName = "tier"
    """Claim naming the caller's tier. Missing: the default tier; naming no tier of `traffic.tiers`: 403."""
    user_claim: ClaimName = "sub"
    """Claim identifying the user: their sticky canary bucket and the user-key header the model servers receive."""
    tenant_claim: ClaimName | None = "tenant"
    """Claim naming the tenant (a string) or tenants (a list of strings) the caller belongs to: a request for a model
    gets 403 unless the claim names the model's tenant or one of its `callers`. null: any authenticated caller may
    call any model."""
    version_override_principals: list[Annotated[str, Field(pattern=r"^[!-~]{1,1024}$")]] = []
    """Request principals (`<issuer>/<sub>`, e.g. canary analysis or testers) allowed to pick a model version with a
    release's override header; anyone else sending that header gets 403."""

    @field_validator("version_override_principals", mode="after")
    @classmethod
    def _principals_of_the_issuer(cls, principals: list[str], info: ValidationInfo) -> list[str]:
        issuer = info.data.get("issuer")  # absent when the issuer itself is invalid (reported there)
        for principal in principals if issuer is not None else []:
            subject = principal.removeprefix(f"{issuer}/")
            if subject == principal or not subject or "*" in principal:
                raise ValueError(
                    f"{principal!r} is not '<issuer>/<sub>' of the issuer {issuer!r} (no wildcards): tokens of other "
                    "issuers never reach the gateway"
                )
        return principals

    @model_validator(mode="after")
    def _one_key_source(self) -> GatewayAuthentication:
        if (self.jwks_uri is None) == (self.jwks is None):
            raise ValueError("give exactly one of 'jwksUri' (https URL of the issuer's keys) or 'jwks' (inline key set)")
        return self


LoadBalancerScheme = Literal["internal", "internet-facing"]


class TrafficConfig(ConfigModel):
    authentication: GatewayAuthentication
    """Who may call the gateway: every request needs a valid JWT of this issuer (401 when invalid, 403 when
    missing); its claims, never client headers, give the tier and the user."""
    hosts: Annotated[list[GatewayHost], Field(min_length=1)] = ["*"]
    """Hosts the gateway serves: DNS names, `*.domain` wildcards or `*`."""
    tls_credential_name: SecretName | None = None
    """A TLS Secret in `istio-system`: HTTPS on 443, HTTP redirects to it. Required in production unless
    `plainHttp`."""
    plain_http: bool = False
    """Serve plain HTTP without TLS on purpose (a production stack must say so to have no TLS credential)."""
    load_balancer_scheme: LoadBalancerScheme = "internal"
    """The gateway's AWS load balancer: reachable inside the VPC only (`internal`), or from the internet."""
    tier_header: HeaderName = "x-tier"
    """Header the gateway filter sets to the token's tier, which routes match on (client values are replaced)."""
    default_tier: TierName = "standard"
    """The tier of a token without a tier claim."""
    bucket_header: HeaderName = "x-user-bucket"
    """Header the gateway filter sets to the user's sticky bucket (client values are replaced)."""
    model_header: HeaderName = "x-model"
    """Header the gateway filter sets to the body's `model` (client values are replaced)."""
    tiers: dict[TierName, TierPolicy] = Field(default_factory=_default_tiers)
    """Per tier: timeout, queue bounds, retries, vLLM priority and largest body; tiers not given keep their defaults
    (premium 120s/64/512/1/0/4 MiB, standard 300s/32/256/1/1/4 MiB, batch 600s/16/128/0/2/16 MiB). A Knative-served
    model's requests may take at most 600 s, what Knative's activator drains."""

    @field_validator("hosts", mode="after")
    @classmethod
    def _distinct_hosts(cls, hosts: list[str]) -> list[str]:
        repeated = sorted({host for host in hosts if hosts.count(host) > 1})
        if repeated:
            raise ValueError(f"hosts are listed twice: {', '.join(repeated)}")
        return hosts

    @field_validator("tiers", mode="after")
    @classmethod
    def _every_tier(cls, tiers: dict[TierName, TierPolicy]) -> dict[TierName, TierPolicy]:
        # A stack may tune some tiers; the others keep their defaults.
        return {**_default_tiers(), **tiers}

    @model_validator(mode="after")
    def _tls_or_plain_http(self) -> TrafficConfig:
        if self.plain_http and self.tls_credential_name is not None:
            raise ValueError("give either 'tlsCredentialName' (HTTPS) or 'plainHttp: true', not both")
        return self
