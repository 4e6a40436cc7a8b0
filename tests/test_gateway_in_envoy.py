"""The gateway in a real Envoy, the test of record for every request path: prod's rendered
Gateway, RequestAuthentication, AuthorizationPolicies, EnvoyFilter, VirtualServices and
DestinationRules (with the batch-labelling server back in, for a batch-only Knative model of
another tenant), built as istiod 1.30.3 builds them (tests/istio_gateway.py) and run by the pinned
Envoy, the release Istio's proxy is built on. Requests go to echo upstreams on loopback; the
assertions are on what an upstream receives and what the client gets. prod's Knative-served
versions sit behind endpoint pickers, as its HPA-served ones do; a Knative model without one
(staging's labeller, which scales to zero) takes its second pass through the same Envoy's local
gateway listener, over ISTIO_MUTUAL (tests/test_gateway_variants_in_envoy.py, with the pins and prod's
variants)."""

from __future__ import annotations

import json
import ssl
from collections import Counter
from collections.abc import Iterator

import pytest

from . import real_envoy
from .envoy_upstreams import Received
from .gateway_envoy_helpers import (
    AUDIENCE,
    CANARY_ANALYSIS_SUBJECT,
    ISSUER,
    KNATIVE_8B,
    SERVERS_70B,
    STANDARD_8B,
    chat,
    only,
    real_envoy_bucket,
    send,
    served,
    token,
)
from .helpers import Evaluated, prod_with_labeller_server, split_module_value
from .real_envoy import Gateway, signed_token

USERS = 10_000


@pytest.fixture(scope="module")
def prod() -> Evaluated:
    return split_module_value("tests/test_gateway_in_envoy.py prod", lambda: Evaluated(prod_with_labeller_server(), shared=True))


@pytest.fixture(scope="module")
def envoy(prod: Evaluated) -> Iterator[Gateway]:
    with real_envoy.running_gateway(prod.manifests()) as running:
        yield running


@pytest.fixture(autouse=True)
def fresh(envoy: Gateway) -> Iterator[None]:
    envoy.upstreams.take()
    envoy.upstreams.answers.clear()
    yield


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


def test_a_batch_only_knative_model_of_another_tenant_is_served_as_batch(envoy):
    tok = token(tier=None, sub="labeller", tenant="team-b")
    response, received = send(envoy, chat("batch-labeller"), tok)
    assert response.status == 200, response.body
    got = only(received)
    assert got.upstream == "outbound|8081|batch-labeller-v1-batch|batch-labeller-v1-epp.team-b.svc.cluster.local"
    assert got.header("x-tier") == "batch"


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
