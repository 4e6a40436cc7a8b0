"""What the tests of the gateway in a real Envoy share (tests/test_gateway_in_envoy.py,
tests/test_gateway_variants_in_envoy.py): the upstreams prod's and staging's routes name, tokens of their
issuers, requests and what the servers read of them."""

from __future__ import annotations

import json
from typing import Any

from .envoy_upstreams import Received, Response
from .helpers import vllm_reads
from .real_envoy import Gateway, signed_token

ISSUER = "https://login.inference.example.com"
AUDIENCE = "inference-api"
CANARY_ANALYSIS_SUBJECT = "canary-analysis"
LOCAL_GATEWAY = 8081  # the local gateway's listener (net-istio's server port, as the KnativeServing keeps it)
SERVERS_70B = "outbound|8081|v1-{tier}|llama-70b-v1-epp.serving.svc.cluster.local"
# The Knative 8B's versions, each behind its endpoint picker (standard: the tier `token()` names).
KNATIVE_8B = "outbound|8081|llama-8b-{version}-{tier}|llama-8b-{version}-epp.serving.svc.cluster.local"
STANDARD_8B = {version: KNATIVE_8B.format(version=version, tier="standard") for version in ("v1", "v2")}
STAGING_ISSUER = "https://login.staging.inference.example.com"
# Staging's labeller: Knative-served without a picker, reached through the local gateway by Host.
LABELLER = "knative|labeller-v1.team-a.svc.cluster.local"


def staging_token(**claims: Any) -> str:
    return signed_token({"iss": STAGING_ISSUER, "aud": AUDIENCE, "sub": "tester", "tenant": "team-a", **claims})


def token(tier: str | None = "standard", sub: str | None = "user-123", tenant: Any = "team-a", **claims: Any) -> str:
    payload: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, **claims}
    for key, value in (("tier", tier), ("sub", sub), ("tenant", tenant)):
        if value is not None:
            payload[key] = value
    return signed_token(payload)


def chat(model: str, **extra: Any) -> str:
    return json.dumps({"messages": [{"role": "user", "content": "hi"}], "model": model, **extra})


def send(envoy: Gateway, body: str | bytes | None, tok: str | None, **kwargs: Any) -> tuple[Response, list[Received]]:
    response = envoy.request(body=body, token=tok, **kwargs)
    return response, envoy.upstreams.take()


def only(received: list[Received]) -> Received:
    assert len(received) == 1, [r.upstream for r in received]
    return received[0]


def served(got: Received) -> dict[str, Any]:
    """The request as the server that received it reads it (tests/helpers.py vllm_reads)."""
    return vllm_reads(got.headers, got.body)


def real_envoy_bucket(user: str) -> int:
    """The bucket the gateway gives a user: FNV-1a 32 of the id, mod 100 (the filter's rule)."""
    value = 0x811C9DC5
    for byte in user.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value % 100
