"""The gateway in a real Envoy, the test of record for every request path: prod's rendered
Gateway, RequestAuthentication, AuthorizationPolicies, EnvoyFilter, VirtualServices and
DestinationRules (with the batch-labelling server back in, for a batch-only Knative model of
another tenant), built as istiod 1.30.3 builds them (tests/istio_gateway.py) and run by the pinned
Envoy, the release Istio's proxy is built on. Requests go to echo upstreams on loopback; the
assertions are on what an upstream receives and what the client gets. prod's Knative-served
versions sit behind endpoint pickers, as its HPA-served ones do; a Knative model without one
(staging's labeller, which scales to zero) takes its second pass through the same Envoy's local
gateway listener, over ISTIO_MUTUAL."""

from __future__ import annotations

import json
import re
import ssl
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components.specs import gateway as gateway_spec
from platform_config.pins import ENVOY, ISTIO_PROXY_ENVOY_VERSION

from . import real_envoy
from .helpers import ROOT, Evaluated, prod_with_labeller_server, vllm_reads
from .real_envoy import Gateway, Received, Response, signed_token

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
USERS = 10_000


@pytest.fixture(scope="module")
def prod() -> Evaluated:
    return Evaluated(prod_with_labeller_server(), shared=True)


@pytest.fixture(scope="module")
def envoy(prod: Evaluated) -> Iterator[Gateway]:
    with real_envoy.running_gateway(prod.manifests()) as running:
        yield running


@pytest.fixture(scope="module")
def staging_envoy() -> Iterator[Gateway]:
    """staging's gateway, for the path of a Knative model without an endpoint picker (its labeller)."""
    from .helpers import raw_stack

    with real_envoy.running_gateway(Evaluated(raw_stack("staging"), shared=True).manifests()) as running:
        yield running


@pytest.fixture(autouse=True)
def fresh(envoy: Gateway) -> Iterator[None]:
    envoy.upstreams.take()
    envoy.upstreams.answers.clear()
    yield


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


# --- the pins ---------------------------------------------------------------------------------


def test_the_envoy_is_the_pinned_release_of_the_line_istios_proxy_is_built_on():
    assert real_envoy.envoy_version() == ENVOY.version
    for requirements in ("requirements-dev.txt", "constraints.txt"):
        assert f"{ENVOY.name}=={ENVOY.version}" in (ROOT / requirements).read_text().split(), requirements
    # Istio's proxy builds Envoy's 1.38 line after 1.38.3 (1.38.4-dev): its newest release.
    built_on = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)-dev", ISTIO_PROXY_ENVOY_VERSION)
    assert built_on is not None
    major, minor, patch = (int(part) for part in built_on.groups())
    assert ENVOY.version == f"{major}.{minor}.{patch - 1}"


def test_the_gateway_keeps_the_charts_service_ports():
    """The tier binds listeners where the chart's Service sends (real_envoy.CHART_LISTENER_PORTS);
    the platform's gateway values leave the chart's ports as they are."""
    from components.specs.mesh import gateway_values

    assert "ports" not in gateway_values(350, "internal")["service"]
    assert "ports" not in gateway_values(None, "internal")["service"]


# --- a served model, end to end --------------------------------------------------------------


def test_a_request_for_a_served_model_reaches_its_servers_with_what_the_gateway_decided(envoy):
    response, received = send(envoy, chat("llama-3.1-70b-instruct"), token(tier="premium"))
    assert response.status == 200, (response.body, envoy.log()[-2000:])
    got = only(received)
    assert got.upstream == SERVERS_70B.format(tier="premium")
    assert got.header("x-tier") == "premium" and got.header("x-model") == "llama-3.1-70b-instruct"
    assert got.header("x-user-id") == "user-123" and got.header("x-user-bucket") == str(real_envoy_bucket("user-123"))
    assert got.header("x-llm-d-inference-fairness-id") == "team-a"
    assert got.header("x-llm-d-inference-objective") == "llama-70b-v1-premium"
    # The token never reaches a server.
    assert got.header("authorization") is None
    assert served(got)["model"] == "llama-3.1-70b-instruct" and served(got)["priority"] == 0
    # The priority in vLLM's header, and the same one in the body for the endpoints that read only the body.
    assert got.all("x-vllm-priority") == ["0"]
    assert got.body.rstrip().endswith(b'"model":"llama-3.1-70b-instruct","priority":0}')
    # The route's timeout, as Envoy enforces it.
    assert got.header("x-envoy-expected-rq-timeout-ms") == "120000"


def test_a_knative_served_model_goes_through_its_versions_picker(envoy):
    response, received = send(envoy, chat("llama-3.1-8b-instruct"), token(tier="standard", sub="user-42"))
    assert response.status == 200, (response.body, envoy.log()[-2000:])
    got = only(received)
    version = "v2" if real_envoy_bucket("user-42") < 10 else "v1"
    # The version's picker, in the tier's band, as for an HPA-served model.
    assert got.upstream == STANDARD_8B[version]
    assert got.header("x-llm-d-inference-objective") == f"llama-8b-{version}-standard"
    assert got.header("x-tier") == "standard" and got.header("x-user-id") == "user-42"
    assert got.header("x-llm-d-inference-fairness-id") == "team-a"
    assert served(got)["priority"] == 1 and served(got)["model"] == "llama-3.1-8b-instruct"
    assert got.all("x-vllm-priority") == ["1"]


def test_a_knative_model_without_a_picker_takes_its_second_pass_through_the_local_gateway(staging_envoy):
    response, received = send(staging_envoy, chat("labeller"), staging_token(tier="batch", sub="user-42"), server_port=80)
    assert response.status == 200, (response.body, staging_envoy.log()[-2000:])
    got = only(received)
    assert got.upstream == LABELLER
    # The local gateway routed it by the Host the first pass set; nothing of the first pass was
    # undone by the second (the filter runs once: the tier, the user and the body stay).
    assert got.header("host") == "labeller-v1.team-a.svc.cluster.local"
    assert got.header("x-tier") == "batch" and got.header("x-user-id") == "user-42"
    assert served(got)["model"] == "labeller"
    assert got.all("x-vllm-priority") == [str(served(got)["priority"])]


def test_a_batch_only_knative_model_of_another_tenant_is_served_as_batch(envoy):
    tok = token(tier=None, sub="labeller", tenant="team-b")
    response, received = send(envoy, chat("batch-labeller"), tok)
    assert response.status == 200, response.body
    got = only(received)
    assert got.upstream == "outbound|8081|batch-labeller-v1-batch|batch-labeller-v1-epp.team-b.svc.cluster.local"
    assert got.header("x-tier") == "batch"


def test_the_local_gateway_takes_only_the_gateways_own_mesh_identity(staging_envoy):
    envoy = staging_envoy
    envoy.upstreams.take()
    body = chat("labeller")
    host = "labeller-v1.team-a.svc.cluster.local"
    # No client certificate: the ISTIO_MUTUAL server refuses the handshake.
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        envoy.request(body=body, server_port=LOCAL_GATEWAY, host=host, reuse=False)
    # Another workload of the mesh (a tenant's pod) cannot send requests through it in the
    # gateway's name, token or not.
    for tok in (None, staging_token()):
        refused, received = send(envoy, body, tok, server_port=LOCAL_GATEWAY, host=host, client_certificate=envoy.intruder)
        assert refused.status == 403 and received == []
    # The gateway itself is served (that is the second pass).
    response, received = send(envoy, body, None, server_port=LOCAL_GATEWAY, host=host, client_certificate=envoy.certificates)
    assert response.status == 200 and only(received).upstream == LABELLER


def test_the_http_listener_redirects_to_https_without_a_token(envoy):
    response, received = send(envoy, None, None, method="GET", path="/v1/models", server_port=80)
    assert response.status == 301 and response.header("location") == f"https://{envoy.host}/v1/models"
    assert received == []
    posted, received = send(envoy, chat("llama-3.1-70b-instruct"), token(), server_port=80)
    assert posted.status == 301 and received == []
    # A client claiming HTTPS is still redirected (Envoy sets x-forwarded-proto itself).
    forged, received = send(envoy, chat("llama-3.1-70b-instruct"), None, server_port=80, headers={"x-forwarded-proto": "https"})
    assert forged.status == 301 and received == []
    # Another host on that port is not the redirect's: it needs a token (Knative's own
    # knative-ingress-gateway serves port 80 for every host on these pods).
    other, received = send(envoy, None, None, method="GET", path="/", server_port=80, host="public-service.example.com")
    assert other.status == 403 and received == []


def test_an_unknown_model_or_host_is_not_found(envoy):
    assert send(envoy, chat("no-such-model"), token())[0].status == 404
    # Another host's TLS server name finds no filter chain on the gateway's HTTPS listener.
    with pytest.raises((ssl.SSLError, ConnectionResetError)):
        envoy.request(body=chat("llama-3.1-70b-instruct"), token=token(), host="other.example.com", reuse=False)


# --- who may call ------------------------------------------------------------------------------


def test_a_request_without_a_verified_token_is_refused(envoy):
    body = chat("llama-3.1-70b-instruct")
    assert send(envoy, body, None)[0].status == 403
    wrong_key = signed_token({"iss": ISSUER, "aud": AUDIENCE, "sub": "x"}, key=b"another key" * 3)
    for bad in (wrong_key, token(exp=1), signed_token({"iss": "https://evil.example.com", "aud": AUDIENCE, "sub": "x"})):
        response, received = send(envoy, body, bad)
        assert response.status == 401 and received == [], response.body
    response, received = send(envoy, body, signed_token({"iss": ISSUER, "aud": "another-api", "sub": "x"}))
    assert response.status == 403 and received == [] and b"Audiences in Jwt are not allowed" in response.body
    # Only the Authorization header carries a token.
    query, received = send(envoy, body, None, path=f"/v1/chat/completions?access_token={token()}")
    assert query.status == 403 and received == []


def test_only_the_named_principal_may_pick_a_version(envoy):
    body = chat("llama-3.1-8b-instruct")
    pinned = {"x-model-version": "v2"}
    response, received = send(envoy, body, token(), headers=pinned)
    assert response.status == 403 and received == []
    # The same subject under another issuer is another principal.
    evil = signed_token({"iss": "https://evil.example.com", "aud": AUDIENCE, "sub": CANARY_ANALYSIS_SUBJECT})
    assert send(envoy, body, evil, headers=pinned)[0].status == 401
    # The canary analysis may: its pick reaches that version's picker.
    for version in ("v1", "v2"):
        response, received = send(envoy, body, token(sub=CANARY_ANALYSIS_SUBJECT), headers={"x-model-version": version})
        assert response.status == 200, response.body
        assert only(received).upstream == STANDARD_8B[version]


def test_a_token_names_its_tenant_and_a_model_answers_only_its_tenants_and_callers(envoy):
    # llama-1b is team-a's alone; the 70B takes team-a and team-b as callers.
    assert send(envoy, chat("llama-3.2-1b-instruct"), token(tenant="team-b"))[0].status == 403
    assert send(envoy, chat("llama-3.2-1b-instruct"), token(tenant=None))[0].status == 403
    assert send(envoy, chat("llama-3.2-1b-instruct"), token(tenant=["team-b", "team-a"]))[0].status == 200
    response, received = send(envoy, chat("llama-3.1-70b-instruct"), token(tenant="team-b"))
    assert response.status == 200 and only(received).header("x-llm-d-inference-fairness-id") == "team-b"


# --- tiers and what the servers read -----------------------------------------------------------


@pytest.mark.parametrize("tier, priority", [("premium", 0), ("standard", 1)])
def test_the_tier_comes_from_the_token_never_from_the_client(envoy, tier, priority):
    forged = [("x-tier", "premium"), ("x-tier", "batch"), ("x-vllm-priority", "-100"), ("x-llm-d-inference-ttl", "3600s")]
    body = chat("llama-3.1-70b-instruct", priority=-100)
    response, received = send(envoy, body, token(tier=tier), headers=forged)
    assert response.status == 200
    got = only(received)
    assert got.upstream == SERVERS_70B.format(tier=tier)
    assert got.all("x-tier") == [tier]
    assert got.all("x-vllm-priority") == [str(priority)] and served(got)["priority"] == priority


def test_a_token_without_a_tier_claim_gets_the_default_tier(envoy):
    response, received = send(envoy, chat("llama-3.1-70b-instruct"), token(tier=None))
    assert response.status == 200 and only(received).header("x-tier") == "standard"


def test_a_tier_the_model_does_not_serve_is_refused_by_its_routes(envoy):
    response, received = send(envoy, chat("llama-3.1-70b-instruct"), token(tier="batch"))
    assert response.status == 403 and received == [] and b"serves tiers premium, standard" in response.body


def test_a_tier_claim_naming_no_tier_is_refused(envoy):
    response, received = send(envoy, chat("llama-3.1-70b-instruct"), token(tier="platinum"))
    assert response.status == 403 and received == []


CLIENT_CONTROL_HEADERS = [
    ("x-tier", "premium"),
    ("x-user-bucket", "0"),
    ("x-model", "llama-3.2-1b-instruct"),
    ("x-user-id", "someone-else"),
    ("x-vllm-priority", "-1"),
    ("x-llm-d-inference-ttl", "3600s"),
    ("x-llm-d-inference-objective", "llama-70b-v1-premium"),
    ("x-llm-d-inference-fairness-id", "team-z"),
    ("x-gateway-destination-endpoint", "10.0.0.1:8000"),
    ("x-gateway-inference-objective", "x"),
    ("x-llm-d-model-name-rewrite", "llama-3.2-1b-instruct"),
    ("x-slo-ttft-ms", "1"),
    ("x-llm-d-future-header", "anything"),
    ("x-vllm-future-header", "anything"),
]


def test_every_client_supplied_control_header_is_stripped(envoy):
    response, received = send(envoy, chat("llama-3.1-70b-instruct"), token(tier="standard"), headers=CLIENT_CONTROL_HEADERS)
    assert response.status == 200
    got = only(received)
    sent = dict(CLIENT_CONTROL_HEADERS)
    for name, value in got.headers:
        assert sent.get(name.lower()) != value, (name, value)
    assert got.all("x-llm-d-inference-objective") == ["llama-70b-v1-standard"]
    # vLLM's priority is the gateway's (standard: 1), never the client's; the picker's TTL header is nobody's.
    assert got.all("x-vllm-priority") == ["1"] and got.header("x-llm-d-inference-ttl") is None


SERVERS_OF = {
    "llama-3.1-70b-instruct": SERVERS_70B.format(tier="premium"),
    "llama-3.2-1b-instruct": "outbound|8081|v1-premium|llama-1b-v1-epp.team-a.svc.cluster.local",
}


@pytest.mark.parametrize(
    "body",
    [
        # The filter reads a first member as top-level without looking further, and appends it.
        '{"model":"llama-3.2-1b-instruct","messages":[],"model":"llama-3.1-70b-instruct","priority":-9}',
        '{"messages":[],"model":"llama-3.2-1b-instruct","model":"llama-3.1-70b-instruct","priority":-9}',
        '{"messages":[{"model":"llama-3.2-1b-instruct"}],"model":"llama-3.1-70b-instruct"}',
        '{"model":"llama-3.1-70b-instruct","priority":-9,"extra":{"priority":-9,"model":"llama-3.2-1b-instruct"}}',
        '{"extra":{"model":"llama-3.2-1b-instruct"},"model":"llama-3.1-70b-instruct","model":"llama-3.2-1b-instruct"}',
    ],
)
def test_the_servers_serve_the_model_the_filter_checked_at_the_tiers_priority(envoy, body):
    """Duplicate names, nested models, a client priority: the server that receives the body is the
    one of the model its last "model" names (as vLLM reads it), with the tier's priority."""
    response, received = send(envoy, body, token(tier="premium"))
    assert response.status == 200, (body, response.body)
    got = only(received)
    read = served(got)
    assert SERVERS_OF[read["model"]] == got.upstream and got.header("x-model") == read["model"], body
    assert read["priority"] == 0


def test_an_adapter_request_names_its_module_and_its_canary_is_sticky(envoy):
    canary = stable = 0
    for i in range(400):
        user = f"adapter-user-{i}"
        response, received = send(envoy, chat("llama-3.1-8b-support"), token(sub=user))
        assert response.status == 200
        module = served(only(received))["model"]
        expected = "llama-3.1-8b-support@r2" if real_envoy_bucket(user) >= 90 else "llama-3.1-8b-support@r1"
        assert module == expected, user
        canary, stable = canary + (module.endswith("@r2")), stable + (module.endswith("@r1"))
    assert canary and stable
    # The override names the revision, for the principal allowed to send it.
    response, received = send(
        envoy, chat("llama-3.1-8b-support"), token(sub=CANARY_ANALYSIS_SUBJECT), headers={"x-model-version": "r2"}
    )
    assert response.status == 200 and served(only(received))["model"] == "llama-3.1-8b-support@r2"


def real_envoy_bucket(user: str) -> int:
    """The bucket the gateway gives a user: FNV-1a 32 of the id, mod 100 (the filter's rule)."""
    value = 0x811C9DC5
    for byte in user.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value % 100


# --- sticky canary buckets over many users -----------------------------------------------------


def _versions(envoy: Gateway, users: list[str], *, in_body: bool) -> dict[str, str]:
    seen: dict[str, str] = {}
    for user in users:
        if in_body:
            # An application's token (a subject, no user claim) calling for its end users.
            response = envoy.request(body=chat("llama-3.1-8b-instruct", user=user), token=token(sub="app-1"))
        else:
            response = envoy.request(body=chat("llama-3.1-8b-instruct"), token=token(sub=user))
        assert response.status == 200
        (got,) = envoy.upstreams.take()
        seen[user] = got.upstream
    return seen


@pytest.fixture(scope="module")
def envoy_with_a_user_claim() -> Iterator[Gateway]:
    """prod with users named by a `uid` claim: a token with a subject but no user claim is an
    application's, whose users the body's OpenAI `user` names. (With the default claim `sub`,
    every token the gateway admits names its user: Istio's request principal needs `iss/sub`.)"""
    raw = prod_with_labeller_server()
    raw["traffic"]["authentication"]["userClaim"] = "uid"
    with real_envoy.running_gateway(Evaluated(raw).manifests()) as running:
        yield running


@pytest.mark.parametrize("in_body", [False, True], ids=["token-sub", "body-user"])
def test_users_stay_on_one_side_of_the_canary_at_its_share(request, in_body):
    envoy = request.getfixturevalue("envoy_with_a_user_claim" if in_body else "envoy")
    envoy.upstreams.take()
    users = [f"sticky-user-{i}" for i in range(USERS)]
    seen = _versions(envoy, users, in_body=in_body)
    shares = Counter(seen.values())
    canary = shares[STANDARD_8B["v2"]] / USERS
    assert abs(canary - 0.10) <= 0.01, shares
    # Sticky: each user's side is the one its bucket names, and stays so.
    assert all((upstream == STANDARD_8B["v2"]) == (real_envoy_bucket(u) < 10) for u, upstream in seen.items())
    again = _versions(envoy, users[:300], in_body=in_body)
    assert all(again[u] == seen[u] for u in again)


# --- bodies --------------------------------------------------------------------------------------


def test_bodies_over_the_tiers_limit_are_refused_before_reaching_a_server(envoy):
    limit = 4 * 1024 * 1024
    big = '{"model":"llama-3.1-70b-instruct","pad":"' + "a" * limit + '"}'
    # A declared length over the limit is refused before the body is sent at all.
    declared = [("content-length", str(len(big))), ("content-type", "application/json")]
    response, received = send(envoy, None, token(tier="premium"), headers=declared)
    assert response.status == 413 and received == []
    # A chunked body (no content-length) is held to it once buffered.
    response, received = send(envoy, _chunked(big), token(tier="premium"), headers={"transfer-encoding": "chunked"})
    assert response.status == 413 and received == []
    # The batch tier takes up to its own, larger limit.
    batch = '{"model":"llama-3.1-8b-instruct-batch","pad":"' + "a" * (limit + 10) + '"}'
    response, received = send(envoy, batch, token(tier="batch"))
    assert response.status == 200 and len(only(received).body) > limit


def _chunked(text: str) -> bytes:
    data = text.encode()
    step = 1 << 16
    chunks = [data[i : i + step] for i in range(0, len(data), step)]
    return b"".join(f"{len(c):x}\r\n".encode() + c + b"\r\n" for c in chunks) + b"0\r\n\r\n"


@pytest.mark.parametrize("body", ["not json", "[1, 2]", '"llama-3.1-70b-instruct"', "", "  "])
def test_bodies_that_are_not_one_json_object_are_refused(envoy, body):
    response, received = send(envoy, body, token())
    assert response.status == 400 and received == []


@pytest.mark.parametrize(
    "body",
    [
        '{"model": "llama-3.1-70b-instruct"',
        '{"model": "llama-3.1-70b-instruct"} {"model": "x"}',
        '{"model": "llama-3.1-70b-instruct", "messages": [}',
        '{"model": "llama-3.1-70b-instruct", "user": "a", "user": "b", "x": [}',
    ],
)
def test_malformed_bodies_are_refused_by_the_gateway_or_stay_malformed_for_the_servers(envoy, body):
    """The filter checks the shape it reads, not all of JSON: what it passes the servers refuse
    with 400 as before (json.loads fails on it), never reading another model than it checked."""
    response, received = send(envoy, body, token())
    if response.status == 400:
        assert received == []
        return
    assert response.status == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(only(received).body)


def test_hostile_bodies_are_refused_or_read_as_the_servers_read_them(envoy):
    tok = token(tier="premium")
    # Deep nesting after the model: the servers refuse what they cannot parse; whatever reaches
    # them names the filter's model last.
    deep = '{"model":"llama-3.1-70b-instruct","x":' + "[" * 5000 + "]" * 5000 + "}"
    response, received = send(envoy, deep, tok)
    assert response.status in (200, 400)
    if received:
        assert only(received).body.rstrip().endswith(b'"model":"llama-3.1-70b-instruct","priority":0}')
    # A huge string value.
    huge = json.dumps({"model": "llama-3.1-70b-instruct", "messages": [{"role": "user", "content": "\u00e9" * 500_000}]})
    response, received = send(envoy, huge, tok)
    assert response.status == 200 and served(only(received))["model"] == "llama-3.1-70b-instruct"
    # Unicode escapes in the model name are read as a JSON parser reads them.
    escaped = '{"model":"llama\\u002d3.1\\u002d70b-instruct","messages":[]}'
    response, received = send(envoy, escaped, tok)
    assert response.status == 200 and only(received).upstream == SERVERS_70B.format(tier="premium")
    assert served(only(received))["model"] == "llama-3.1-70b-instruct"
    # An escaped line break cannot split the model header.
    response, received = send(envoy, '{"model":"llama-3.1-70b-instruct\\r\\nx-tier: premium"}', tok)
    assert response.status == 400 and received == []
    # A model name longer than the cap.
    response, received = send(envoy, json.dumps({"model": "m" * 300}), tok)
    assert response.status == 400 and received == []


def only_body(received: list[Received]) -> bytes:
    return received[0].body


# --- shedding ------------------------------------------------------------------------------------


@pytest.mark.parametrize("tier, retry_after", [("premium", "5"), ("standard", "10")])
@pytest.mark.parametrize(
    "model, upstream",
    [("llama-3.1-70b-instruct", SERVERS_70B), ("llama-3.1-8b-instruct", KNATIVE_8B.replace("{version}", "v1"))],
    ids=["hpa", "knative"],
)
def test_a_picker_shed_is_503_with_the_tiers_retry_after(envoy, model, upstream, tier, retry_after):
    """On both serving paths a request the version's picker drops past its tier's bound (the picker's proxy
    answers 429 with a dropped reason: tests/test_picker_proxy_in_envoy.py) reaches the client as 503 with the
    tier's Retry-After."""

    def shed(_: Received) -> tuple[int, dict[str, str], bytes]:
        return 429, {"x-llm-d-request-dropped-reason": "rejected-ttl-expired"}, b"dropped"

    envoy.upstreams.answers[upstream.format(tier=tier)] = shed
    # A user on the 8B's stable side (its canary takes buckets below 10).
    user = next(f"u{i}" for i in range(100) if real_envoy_bucket(f"u{i}") >= 10)
    response, received = send(envoy, chat(model), token(tier=tier, sub=user))
    assert only(received).upstream == upstream.format(tier=tier)
    assert response.status == 503 and response.header("retry-after") == retry_after


# vLLM 0.33.0's admission refusals (vllm/exceptions.py MaxQueuedTokensError, QueueOverflowError).
PREFILL_BACKLOG_FULL = (
    "The engine has reached its prefill token backlog limit. Please try again later or on a different instance."
)
REQUEST_QUEUE_FULL = (
    "The engine is currently busy and cannot accept new requests. Please try again later or on a different instance."
)


def vllm_refusal(message: str) -> real_envoy.Answer:
    """What vLLM answers past an admission bound: a GracefulHTTPError as the OpenAI error body with code 503
    (vllm/entrypoints/serve/exception_handling/error_response.py), no Retry-After."""
    error = {"message": message, "type": "Service Unavailable", "param": None, "code": 503}
    return lambda _: (503, {"content-type": "application/json"}, json.dumps({"error": error}).encode())


def test_a_servers_503_is_told_when_to_come_back_and_not_retried(staging_envoy):
    """A Knative replica without a picker in front (staging's labeller) whose vLLM is at its admission bound answers
    at once, before it queues the request, as vLLM 0.33.0 writes it (tests/test_vllm_source.py: QueueOverflowError or
    MaxQueuedTokensError, a GracefulHTTPError rendered by vllm/entrypoints/serve/exception_handling/error_response.py
    as the OpenAI error body with code 503), no Retry-After. With no breaker in queue-proxy and no burst capacity
    (components/backends/knative.py) that is that path's bound once a replica is ready; the client is told the
    tier's Retry-After."""
    envoy = staging_envoy
    envoy.upstreams.take()
    for refusal in (PREFILL_BACKLOG_FULL, REQUEST_QUEUE_FULL):
        envoy.upstreams.answers[LABELLER] = vllm_refusal(refusal)
        response, received = send(envoy, chat("labeller"), staging_token(tier="batch"), server_port=80)
        envoy.upstreams.answers.clear()
        assert response.status == 503 and response.header("retry-after") == "60"
        # The routes retry only what never reached a server (connect-failure, refused-stream).
        assert len(received) == 1


def test_the_gateways_own_overflow_answer_is_told_when_to_come_back(prod):
    def no_room(config: dict[str, Any]) -> None:
        for cluster in config["static_resources"]["clusters"]:
            if cluster["name"] == SERVERS_70B.format(tier="standard"):
                cluster["circuit_breakers"]["thresholds"][0]["max_requests"] = 0
                cluster["circuit_breakers"]["thresholds"][0]["max_pending_requests"] = 0

    with real_envoy.running_gateway(prod.manifests(), bootstrap_hook=no_room) as envoy:
        response = envoy.request(body=chat("llama-3.1-70b-instruct"), token=token(tier="standard"))
        assert response.status == 503 and response.header("x-envoy-overloaded") == "true"
        assert response.header("retry-after") == "10"
        assert envoy.upstreams.take() == []


# --- the stand-in's successor ----------------------------------------------------------------------


def test_the_envoy_runs_the_rendered_filter_on_the_serving_listener_only(prod):
    """The Lua in the Envoy's config is the rendered EnvoyFilter's, byte for byte, on the public
    serving listener; neither the redirect listener nor Knative's local gateway runs it."""
    from components.constants import GATEWAY_SELECTOR

    from .istio_gateway import Certificates, GatewayObjects, bootstrap, listeners, upstream_names

    objects = GatewayObjects.from_manifests(prod.manifests(), GATEWAY_SELECTOR)
    numbers = [listener.number for listener in listeners(objects, real_envoy.CHART_LISTENER_PORTS)]
    config = bootstrap(
        objects,
        jwks="{}",
        listener_ports=real_envoy.CHART_LISTENER_PORTS,
        bound={number: 20000 + number for number in numbers},
        admin_port=1,
        upstreams={name: ("127.0.0.1", 1) for name in upstream_names(objects)},
        certificates=Certificates("c", "k", "ca", "mc", "mk"),
    )
    codes = {
        listener["name"]: [
            f["typed_config"]["default_source_code"]["inline_string"]
            for f in listener["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"]
            if f["name"] == "envoy.filters.http.lua"
        ]
        for listener in config["static_resources"]["listeners"]
    }
    assert set(codes) == {"0.0.0.0_443", "0.0.0.0_80", f"0.0.0.0_{LOCAL_GATEWAY}"}
    (code,) = codes["0.0.0.0_443"]
    assert code.endswith(Path(gateway_spec.LUA_SOURCE).read_text()) and code.startswith("local CONFIG = {")
    assert codes["0.0.0.0_80"] == [] and codes[f"0.0.0.0_{LOCAL_GATEWAY}"] == []


def test_the_gateway_benchmark_runs_and_measures_each_variant():
    """`make bench`'s real-Envoy benchmark at a tiny size, so it cannot rot."""
    from benchmarks.bench_filter import CASES
    from benchmarks.bench_gateway import VARIANTS, measure

    results = measure(1, {"1KB": 1 << 10}, most=5)
    # Every case ran through every variant (each request answered 200, run_batch checks it).
    assert [(label, case.label) for label, case, _ in results] == [("1KB", case.label) for case in CASES]
    assert all(set(cpu) == set(VARIANTS) and min(cpu.values()) >= 0 for _, _, cpu in results)


@pytest.fixture(scope="module")
def envoy_without_override_principals() -> Iterator[Gateway]:
    """prod with no `versionOverridePrincipals` and a second release override header."""
    raw = prod_with_labeller_server()
    del raw["traffic"]["authentication"]["versionOverridePrincipals"]
    raw["models"][0]["release"]["overrideHeader"] = "x-pin-version"
    with real_envoy.running_gateway(Evaluated(raw).manifests()) as running:
        yield running


def test_with_no_override_principals_nobody_may_pick_a_version(envoy_without_override_principals):
    envoy = envoy_without_override_principals
    for header, model in (("x-model-version", "llama-3.1-8b-instruct"), ("x-pin-version", "llama-3.1-70b-instruct")):
        for tok in (token(), token(sub=CANARY_ANALYSIS_SUBJECT)):
            response, received = send(envoy, chat(model), tok, headers={header: "v1"})
            assert response.status == 403 and received == [], (header, response.body)
        # Without the header both are served.
        assert send(envoy, chat(model), token())[0].status == 200


@pytest.mark.parametrize("stack", ["dev", "staging"])
def test_every_model_of_the_other_stacks_is_served_through_its_gateway(stack):
    """dev and staging serve plain HTTP on port 80 (the filter there, no redirect): each model, on
    each tier it serves, reaches its servers with a token of its tenant, and only so."""
    from .helpers import raw_stack, validate

    raw = raw_stack(stack)
    plan = validate(raw)
    auth = plan.config.traffic.authentication
    with real_envoy.running_gateway(Evaluated(raw).manifests()) as envoy:
        for route in plan.routes:
            for tier in {t.tier for t in route.tiers}:
                claims = {"iss": auth.issuer, "aud": auth.audiences[0], "sub": "u-1", "tier": tier, "tenant": route.model.tenant}
                response, received = send(envoy, chat(route.model.openai_name), signed_token(claims), server_port=80)
                assert response.status == 200, (route.model.openai_name, tier, response.body)
                got = only(received)
                assert got.header("x-tier") == tier and served(got)["model"] == route.model.openai_name
        anyone = next(iter(plan.routes)).model.openai_name
        assert send(envoy, chat(anyone), None, server_port=80)[0].status == 403
        body = chat(anyone)
        refused, received = send(envoy, body, None, server_port=LOCAL_GATEWAY, host="x.svc", client_certificate=envoy.intruder)
        assert refused.status == 403 and received == []
