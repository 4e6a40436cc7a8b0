"""The gateway secure by default: who may call it (a verified JWT, the version override kept to
named principals), identity from the token's claims only, bounded resources, a body scan that is
linear, capped and fails closed, an internal load balancer unless chosen, and the config values
behind all of it refused with a named key when they are wrong."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from components.specs import gateway
from components.specs.mesh import gateway_values, istiod_values

from .helpers import Evaluated, config_problems, prod_with_labeller_server, raw_stack, schema_validator, set_at, validate
from .lua_filter import Request, chat_body, fnv1a32, lua_runtime, token

ISSUER = "https://login.inference.example.com"
CANARY_ANALYSIS = f"{ISSUER}/canary-analysis"


@pytest.fixture(scope="module")
def prod() -> Evaluated:
    return Evaluated(prod_with_labeller_server(), shared=True)


@pytest.fixture(scope="module")
def lua(prod):
    return lua_runtime(prod)


def gateway_objects(evaluated: Evaluated) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (m["kind"], m["metadata"]["name"]): m
        for m in evaluated.manifests()
        if m["metadata"].get("namespace") == "istio-system" and m["apiVersion"].startswith(("security.istio.io", "networking"))
    }


# --- who may call the gateway ----------------------------------------------------------------


def test_tokens_of_the_configured_issuer_are_verified_from_the_authorization_header_only(prod):
    authn = prod.k8s("RequestAuthentication", "inference-gateway-jwt", "istio-system")
    assert authn["spec"]["selector"] == {"matchLabels": {"istio": "ingressgateway"}}
    (rule,) = authn["spec"]["jwtRules"]
    assert rule == {
        "issuer": ISSUER,
        "jwksUri": f"{ISSUER}/.well-known/jwks.json",
        "audiences": ["inference-api"],
        "fromHeaders": [{"name": "authorization", "prefix": "Bearer "}],
    }
    # The claims are read from the verified payload, not copied to headers a client could send too.
    assert "outputClaimToHeaders" not in rule and "forwardOriginalToken" not in rule


def test_inline_jwks_is_passed_on_instead_of_a_uri(prod_raw):
    jwks = json.dumps({"keys": [{"kty": "EC", "crv": "P-256", "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "y": "x"}]})
    auth = prod_raw["traffic"]["authentication"]
    del auth["jwksUri"]
    auth["jwks"] = jwks
    (rule,) = gateway.request_authentication(_traffic(prod_raw).authentication)["spec"]["jwtRules"]
    assert rule["jwks"] == jwks and "jwksUri" not in rule


def _traffic(raw: dict[str, Any]):
    return validate(raw).config.traffic


def test_with_no_override_principals_nobody_may_pick_a_version(prod_raw):
    del prod_raw["traffic"]["authentication"]["versionOverridePrincipals"]
    prod_raw["models"][1]["release"]["overrideHeader"] = "x-pin-version"
    plan = validate(prod_raw)
    policies = gateway.access_policies(plan.config.traffic, plan.routes)
    (deny,) = [p for p in policies if p["kind"] == "AuthorizationPolicy" and p["spec"]["action"] == "DENY"]
    # Every release's override header is covered, the changed one included.
    # (That these refuse everyone, in Envoy: tests/test_gateway_variants_in_envoy.py.)
    assert [r["when"][0]["key"] for r in deny["spec"]["rules"]] == [
        "request.headers[x-model-version]",
        "request.headers[x-pin-version]",
    ]
    assert all("from" not in rule for rule in deny["spec"]["rules"])


def test_gateway_objects_validate_against_their_crd_schemas(prod):
    validator = schema_validator()
    objects = gateway_objects(prod)
    assert {kind for kind, _ in objects} >= {"RequestAuthentication", "AuthorizationPolicy", "EnvoyFilter", "Gateway"}
    for obj in objects.values():
        result = validator.validate(obj)
        assert result.status == "valid", (result.label, result.schema, result.errors)


# --- identity from the token's claims ----------------------------------------------------------


def test_tier_and_user_come_from_claims_and_client_headers_select_nothing(lua):
    forged = {":method": "POST", "x-tier": "premium", "x-user-id": "victim", "x-user-bucket": "0", "x-model": "other"}
    request = Request(lua, forged, chat_body(), claims=token(tier="batch", sub="alice"))
    assert request.headers["x-tier"] == "batch"
    assert request.headers["x-user-bucket"] == str(fnv1a32(b"alice") % 100)
    assert request.headers["x-user-id"] == "alice" and request.headers["x-model"] == "llama-3.1-8b-instruct"
    # No user claim: no bucket (the weighted split) and no user header, whatever the client sent.
    anonymous = Request(lua, forged, chat_body(), claims=token(sub=None))
    assert anonymous.headers["x-tier"] == "standard"
    assert "x-user-bucket" not in anonymous.headers and "x-user-id" not in anonymous.headers


@pytest.mark.parametrize("claimed", ["platinum", "", "PREMIUM"])
def test_a_tier_claim_naming_no_tier_is_refused(lua, claimed):
    request = Request(lua, {":method": "GET", "x-tier": "premium"}, claims=token(tier=claimed))
    assert request.status == "403" and "tier claim" in request.reply


def test_a_tier_claim_that_is_not_a_string_is_refused(lua):
    request = Request(lua, {":method": "GET"}, claims={**token(), "tier": 0})
    assert request.status == "403"


@pytest.mark.parametrize("user", ["alice\r\nx-tier: premium", "u" * 257])
def test_a_user_claim_that_is_no_header_value_is_refused(lua, user):
    request = Request(lua, {":method": "GET"}, claims=token(sub=user))
    assert request.status == "403" and "x-user-id" not in request.headers


def test_an_escaped_line_break_in_the_model_cannot_split_a_header(lua):
    raw = '{"model": "llama-3.1-8b-instruct\\r\\nx-tier: premium"}'
    request = Request(lua, {":method": "POST"}, raw)
    assert request.status == "400" and "x-model" not in request.headers


def test_claim_names_come_from_the_config(prod_raw):
    auth = prod_raw["traffic"]["authentication"]
    auth["tierClaim"], auth["userClaim"] = "https://inference.example.com/plan", "email"
    runtime = lua_runtime(Evaluated(prod_raw))
    claims = token(sub="ignored", **{"https://inference.example.com/plan": "premium", "email": "a@example.com", "tier": "batch"})
    request = Request(runtime, {":method": "GET"}, claims=claims)
    assert request.headers["x-tier"] == "premium"
    assert request.headers["x-user-bucket"] == str(fnv1a32(b"a@example.com") % 100)


# --- bodies: limits per tier, fail closed, linear and capped -------------------------------------


# A body that is not one JSON object, or whose model cannot be a header value. Malformed objects
# are refused by the filter's slow path (its caps too), and on its fast path by the servers
# (vLLM's json.loads, the picker's encoding/json), which the filter's appended members never
# make accept them: tests/test_gateway_filter_body.py.
@pytest.mark.parametrize(
    "raw",
    [
        "",
        "not json",
        "[1, 2]",
        '{"model": "' + "m" * 257 + '"}',
        '{"model": "llama-3.1-8b-instruct\\u000d"}',
    ],
)
def test_malformed_or_over_cap_bodies_get_400_and_are_not_forwarded(lua, raw):
    request = Request(lua, {":method": "POST"}, raw, claims=token(tier="premium"))
    assert request.status == "400", raw[:80]
    assert request.body == raw and "x-model" not in request.headers


def test_nesting_within_the_cap_is_accepted(lua):
    raw = '{"m": {"model": 1}, "model": "llama-3.1-8b-instruct", "nested": ' + "[" * 64 + "]" * 64 + "}"
    assert Request(lua, {":method": "POST"}, raw, claims=token(tier="premium")).status is None


def test_bodies_over_the_tiers_limit_get_413_before_they_are_read(lua):
    limits = gateway.filter_config(_traffic(raw_stack("prod")), ())["max_body_bytes"]
    assert limits == {"premium": 4 << 20, "standard": 4 << 20, "batch": 16 << 20}
    declared = Request(lua, {":method": "POST", "content-length": str((4 << 20) + 1)}, chat_body(), claims=token(tier="premium"))
    assert declared.status == "413" and not declared.body_read and "premium" in declared.reply
    # Chunked (no content-length): the buffered body is measured.
    big = chat_body(padding="x" * (4 << 20))
    assert Request(lua, {":method": "POST"}, big, claims=token(tier="standard")).status == "413"
    # The batch tier takes it.
    assert Request(lua, {":method": "POST"}, big, claims=token(tier="batch")).status is None


def test_the_listener_buffers_the_largest_tiers_body_only(prod_raw):
    prod_raw["traffic"]["tiers"] = {
        tier: {
            "timeout": "60s",
            "maxPendingRequests": 8,
            "maxRequests": 8,
            "retryAttempts": 0,
            "vllmPriority": p,
            "maxRequestBodyBytes": b,
        }
        for tier, p, b in (("premium", 0, 1 << 20), ("standard", 1, 2 << 20), ("batch", 2, 3 << 20))
    }
    assert gateway.max_request_body_bytes(_traffic(prod_raw)) == 3 << 20


def test_a_million_tiny_members_are_refused_after_the_cap(lua):
    members = 1_400_000
    raw = "{" + ",".join(f'"{i % 1000}":1' for i in range(members)) + "}"
    found, reason, stopped_at = lua.globals().GATEWAY_FILTER.members(raw)
    assert found is None and "more than 128 top-level members" in reason
    # The scan stopped right after the 128th member: the first ~1 KiB of an 8 MiB body.
    assert stopped_at == len("{" + ",".join(f'"{i % 1000}":1' for i in range(128))) + 2
    # The filter's slow path (a body naming the model twice, not first) holds the cap; on its
    # fast path the tier's body limit bounds what the servers parse.
    slow = '{"m": {"model": 1}, "model": "llama-3.1-8b-instruct", ' + raw[1:]
    request = Request(lua, {":method": "POST"}, slow, claims=token(tier="batch"))
    assert request.status == "400" and "128" in request.reply


def test_up_to_the_cap_members_are_read(lua):
    raw = json.dumps({"m": {"model": 1}, "model": "llama-3.1-8b-instruct", **{f"k{i}": i for i in range(126)}})
    request = Request(lua, {":method": "POST"}, raw, claims=token(tier="batch"))
    assert request.status is None and request.headers["x-model"] == "llama-3.1-8b-instruct"


# --- connection and stream bounds, overload manager, load balancer -----------------------------


def test_the_gateway_bounds_headers_streams_and_idle_time(prod):
    envoy_filter = prod.k8s("EnvoyFilter", "inference-gateway-filter", "istio-system")
    patches = {p["applyTo"]: p["patch"]["value"] for p in envoy_filter["spec"]["configPatches"]}
    assert patches["LISTENER"] == {"per_connection_buffer_limit_bytes": 16 << 20}
    hcm = patches["NETWORK_FILTER"]["typed_config"]
    assert hcm["max_request_headers_kb"] == 32
    assert hcm["common_http_protocol_options"] == {"idle_timeout": "300s", "max_headers_count": 64}
    assert hcm["http2_protocol_options"] == {"max_concurrent_streams": 64}
    # The request phase is bounded apart from the long silence an unstreamed answer may need.
    assert (hcm["request_headers_timeout"], hcm["request_timeout"], hcm["stream_idle_timeout"]) == ("10s", "60s", "630s")


def test_every_proxy_caps_its_downstream_connections():
    metadata = istiod_values(1)["meshConfig"]["defaultConfig"]["proxyMetadata"]
    assert metadata == {"ISTIO_META_GLOBAL_DOWNSTREAM_MAX_CONNECTIONS": "8192"}


@pytest.mark.parametrize("scheme", ["internal", "internet-facing"])
def test_the_load_balancer_scheme_is_always_written(scheme):
    annotations = gateway_values(690, scheme)["service"]["annotations"]
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-scheme"] == scheme


def test_the_gateway_load_balancer_is_internal_by_default(prod):
    (release,) = [r for r in prod.of_type("kubernetes:helm.sh/v3:Release") if r["inputs"]["name"] == "istio-ingressgateway"]
    assert (
        release["inputs"]["values"]["service"]["annotations"]["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal"
    )


# prod: llama-3.1-8b-instruct runs in tenant `serving` with callers team-a and team-b;
# batch-labeller runs in team-b for itself alone.
@pytest.mark.parametrize(
    "model, tenant, allowed",
    [
        ("llama-3.1-8b-instruct", "team-a", True),
        ("llama-3.1-8b-instruct", "serving", True),
        ("llama-3.1-8b-instruct", ["other", "team-b"], True),
        ("batch-labeller", "team-b", True),
        ("batch-labeller", "team-a", False),
        ("batch-labeller", ["team-a", "serving"], False),
        ("llama-3.1-8b-instruct", "team-c", False),
        ("llama-3.1-8b-instruct", None, False),
        ("llama-3.1-8b-instruct", 7, False),
        ("llama-3.1-8b-instruct", {"team-a": True}, False),
    ],
)
def test_a_model_answers_only_tokens_naming_its_tenant_or_callers(lua, model, tenant, allowed):
    body = json.dumps({"model": model, "prompt": "hi"})
    request = Request(lua, {":method": "POST"}, body, claims=token(tier="batch", tenant=tenant))
    if allowed:
        assert request.status is None and request.headers["x-model"] == model
    else:
        assert request.status == "403" and "tenant claim" in request.reply


def test_without_a_tenant_claim_every_authenticated_caller_reaches_every_model(prod_raw):
    prod_raw["traffic"]["authentication"]["tenantClaim"] = None
    runtime = lua_runtime(Evaluated(prod_raw))
    body = json.dumps({"model": "batch-labeller", "prompt": "hi"})
    assert Request(runtime, {":method": "POST"}, body, claims=token(tier="batch", tenant="team-a")).status is None


def test_callers_must_be_tenants(prod_raw):
    prod_raw["models"][0]["callers"] = ["team-a", "nobody"]
    assert config_problems(prod_raw) == [
        "inference-platform:models[0].callers[1]: unknown tenant 'nobody'; tenants: serving, team-a, team-b"
    ]


# --- the endpoint pickers behind the gateway ------------------------------------------------

EPP_HEADERS = {
    "x-llm-d-inference-objective": "llama-8b-v1-premium",
    "x-gateway-inference-objective": "llama-8b-v1-premium",
    "x-llm-d-inference-fairness-id": "me",
    "x-gateway-destination-endpoint": "10.0.0.1:22",
    "x-llm-d-model-name-rewrite": "other-model",
}


def test_clients_cannot_pick_a_queue_priority_a_server_or_a_model_rewrite(lua):
    request = Request(lua, {":method": "POST", **EPP_HEADERS}, chat_body(), claims=token(tier="batch"))
    assert request.status is None
    # The flow is the verified calling tenant's, never the client's value.
    assert request.headers.pop("x-llm-d-inference-fairness-id") == "team-a"
    assert not set(EPP_HEADERS) & set(request.headers), request.headers


def test_the_picker_flow_is_the_calling_tenant_or_else_the_tokens_user(lua, prod_raw):
    # A list claim: the tenant of those that may call the model.
    claims = token(tier="premium", tenant=["team-b", "team-a"])
    request = Request(lua, {":method": "POST"}, json.dumps({"model": "llama-3.2-1b-instruct", "messages": []}), claims=claims)
    assert request.status is None and request.headers["x-llm-d-inference-fairness-id"] == "team-a"
    # Scoping off: the token's user; a body user never names a flow.
    prod_raw["traffic"]["authentication"]["tenantClaim"] = None
    runtime = lua_runtime(Evaluated(prod_raw))
    body = json.dumps({"model": "llama-3.2-1b-instruct", "messages": [], "user": "someone-else"})
    assert Request(runtime, {":method": "POST"}, body, claims=token(tier="premium")).headers["x-llm-d-inference-fairness-id"] == (
        "user-123"
    )
    anonymous = Request(runtime, {":method": "POST"}, body, claims=token(tier="premium", sub=None))
    assert anonymous.status is None and "x-llm-d-inference-fairness-id" not in anonymous.headers


@pytest.mark.parametrize("tier, retry_after", [("premium", "5"), ("standard", "10"), ("batch", "60")])
def test_a_shed_request_is_503_with_retry_after_its_tiers_queue_timeout(lua, tier, retry_after):
    request = Request(lua, {":method": "POST"}, chat_body(), claims=token(tier=tier))
    shed = request.response({":status": "429", "x-llm-d-request-dropped-reason": "rejected-ttl-expired"})
    assert shed[":status"] == "503" and shed["retry-after"] == retry_after
    # The picker's own 503 (no server can take it) gets the same Retry-After.
    unavailable = request.response({":status": "503", "x-llm-d-request-dropped-reason": "rejected-no-endpoints"})
    assert unavailable[":status"] == "503" and unavailable["retry-after"] == retry_after


def test_other_429s_and_answers_pass_unchanged(lua):
    request = Request(lua, {":method": "POST"}, chat_body(), claims=token(tier="premium"))
    assert request.response({":status": "429"}) == {":status": "429"}
    assert request.response({":status": "200", "content-type": "application/json"})[":status"] == "200"
    # A 503 that names its own Retry-After keeps it.
    assert request.response({":status": "503", "retry-after": "1"}) == {":status": "503", "retry-after": "1"}


def test_every_other_503_is_told_when_to_come_back(lua):
    request = Request(lua, {":method": "POST"}, chat_body(), claims=token(tier="premium"))
    assert request.response({":status": "503"}) == {":status": "503", "retry-after": "5"}
    overflow = request.response({":status": "503", "x-envoy-overloaded": "true"})
    assert overflow["retry-after"] == "5"


def test_an_internet_facing_load_balancer_is_an_explicit_choice_that_reaches_the_service(prod_raw):
    prod_raw["traffic"]["loadBalancerScheme"] = "internet-facing"
    program = Evaluated(prod_raw)
    (release,) = [r for r in program.of_type("kubernetes:helm.sh/v3:Release") if r["inputs"]["name"] == "istio-ingressgateway"]
    annotations = release["inputs"]["values"]["service"]["annotations"]
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internet-facing"


# --- config: named-key errors ------------------------------------------------------------------


def _with(raw: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    set_at(raw, path, value)
    return raw


AUTH = ("traffic", "authentication")
A = "traffic.authentication"
# (where the value goes, the value (... removes the key), the key the error names, what it says)
BAD_CONFIG = [
    (AUTH, ..., A, "required key is missing"),
    ((*AUTH, "issuer"), "http://login.inference.example.com", f"{A}.issuer", "is not an https URL"),
    ((*AUTH, "issuer"), "https://login.example.com/\n", f"{A}.issuer", "is not an https URL"),
    ((*AUTH, "jwksUri"), "https://user:pw@login.example.com/keys", f"{A}.jwksUri", "is not an https URL"),
    ((*AUTH, "jwks"), '{"keys": [{"kty": "RSA", "n": "x", "e": "AQAB"}]}', A, "exactly one of 'jwksUri'"),
    ((*AUTH, "jwksUri"), ..., A, "exactly one of 'jwksUri'"),
    ((*AUTH, "audiences"), [], f"{A}.audiences", "at least 1"),
    ((*AUTH, "tierClaim"), "my tier", f"{A}.tierClaim", "allowed form"),
    ((*AUTH, "versionOverridePrincipals"), ["https://other.example.com/canary"], f"{A}.versionOverridePrincipals", "<sub>"),
    ((*AUTH, "versionOverridePrincipals"), [f"{ISSUER}/*"], f"{A}.versionOverridePrincipals", "no wildcards"),
    ((*AUTH, "versionOverridePrincipals"), [f"{ISSUER}/"], f"{A}.versionOverridePrincipals", "<sub>"),
    (("traffic", "hosts"), ["api.example.com\n"], "traffic.hosts", "is not a gateway host"),
    (("traffic", "hosts"), ["api.*.example.com"], "traffic.hosts", "is not a gateway host"),
    (("traffic", "hosts"), ["Api.Example.com"], "traffic.hosts", "is not a gateway host"),
    (("traffic", "hosts"), ["ns/api.example.com"], "traffic.hosts", "is not a gateway host"),
    (("traffic", "hosts"), ["a" * 64 + ".example.com"], "traffic.hosts", "is not a gateway host"),
    (("traffic", "hosts"), ["a.example.com", "a.example.com"], "traffic.hosts", "listed twice"),
    (("traffic", "tlsCredentialName"), "Inference_TLS", "traffic.tlsCredentialName", "is not a Secret name"),
    (("traffic", "tlsCredentialName"), ..., "traffic.tlsCredentialName", "production needs HTTPS"),
    (("traffic", "plainHttp"), True, "traffic", "'plainHttp: true', not both"),
    (("traffic", "loadBalancerScheme"), "public", "traffic.loadBalancerScheme", "internet-facing"),
    (("traffic", "tiers", "batch", "maxRequestBodyBytes"), 1 << 30, "traffic.tiers.batch.maxRequestBodyBytes", "67108864"),
]


@pytest.mark.parametrize(
    "path, value, key, message", BAD_CONFIG, ids=[f"{'.'.join(map(str, p))}={v!r:.30}" for p, v, _, _ in BAD_CONFIG]
)
def test_bad_gateway_config_is_refused_with_a_named_key(prod_raw, path, value, key, message):
    prod_raw["traffic"]["tiers"] = {
        "batch": {"timeout": "600s", "maxPendingRequests": 16, "maxRequests": 128, "retryAttempts": 0, "vllmPriority": 2}
    }
    problems = config_problems(_with(prod_raw, path, value))
    named = [p for p in problems if p.startswith(f"inference-platform:{key}") and p[len(f"inference-platform:{key}")] in ":["]
    assert any(message in p for p in named), problems


@pytest.mark.parametrize(
    "jwks, message",
    [
        ("not json", "is not JSON"),
        ('{"keys": []}', "non-empty list"),
        ('{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}', "only public keys"),
        ('{"keys": [{"kty": "RSA", "n": "x", "e": "AQAB", "d": "secret"}]}', "private key material (d)"),
    ],
)
def test_inline_jwks_must_be_a_public_key_set(prod_raw, jwks, message):
    auth = prod_raw["traffic"]["authentication"]
    del auth["jwksUri"]
    auth["jwks"] = jwks
    problems = config_problems(prod_raw)
    assert any("traffic.authentication.jwks" in p and message in p for p in problems), problems


def test_plain_http_in_production_is_an_explicit_choice(prod_raw):
    del prod_raw["traffic"]["tlsCredentialName"]
    prod_raw["traffic"]["plainHttp"] = True
    servers = gateway.gateway(_traffic(prod_raw))["spec"]["servers"]
    assert [s["port"]["number"] for s in servers] == [80] and "tls" not in servers[0]


@pytest.mark.parametrize("host", ["*", "*.inference.example.com", "api.inference.example.com", "a-1.b2.example"])
def test_gateway_hosts_istio_takes(prod_raw, host):
    prod_raw["traffic"]["hosts"] = [host]
    assert _traffic(prod_raw).hosts == [host]
