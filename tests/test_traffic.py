"""Traffic: Istio routes, canaries with header override and sticky buckets, request tiers,
isolation; the gateway filter's real Lua source run in LuaJIT, its regexes checked with RE2."""

from __future__ import annotations

import json

import lupa.luajit21 as luajit
import pytest
import re2

from components.specs import gateway
from components.specs.gateway import LUA_SOURCE
from components.specs.routes import range_regex, sticky_ranges
from platform_config import parse_platform_config

from .helpers import Evaluated, config_problems, prod_with_labeller_server, raw_stack, validate, vllm_reads

RELEASE = "kubernetes:helm.sh/v3:Release"
N_KEYS = 100_000


@pytest.fixture(scope="module")
def prod() -> Evaluated:
    return Evaluated(prod_with_labeller_server(), shared=True)


@pytest.fixture(scope="module")
def staging() -> Evaluated:
    return Evaluated(raw_stack("staging"), shared=True)


def vs(evaluated: Evaluated, model: str, namespace: str) -> dict:
    return evaluated.k8s("VirtualService", model, namespace)


# --- RE2 bucket ranges ------------------------------------------------------------------------


def test_bucket_regexes_match_exactly_the_intended_buckets_for_every_weight():
    buckets = [str(b) for b in range(100)]
    for weight in range(101):
        canary, stable = sticky_ranges(weight)
        for pattern, wanted in ((canary, set(range(weight))), (stable, set(range(weight, 100)))):
            if not wanted:
                assert pattern is None, weight
                continue
            compiled = re2.compile(pattern)
            matched = {int(b) for b in buckets if compiled.fullmatch(b)}
            assert matched == wanted, (weight, pattern)
            # Never matches anything but a bucket (full match, as Envoy applies it).
            for other in ("", "-1", "100", "07", "5 ", "1a"):
                assert not compiled.fullmatch(other), (pattern, other)


def test_range_regex_shapes():
    assert range_regex(0, 9) == "[0-9]"
    assert range_regex(10, 99) == "[1-9][0-9]"
    assert range_regex(0, 24) == "([0-9]|1[0-9]|2[0-4])"
    assert range_regex(5, 5) == "5"


# --- the gateway filter in LuaJIT -------------------------------------------------------------

HARNESS = """
-- Envoy's Lua stream handle as the filter uses it: headers, the buffered body, the stream's
-- dynamic metadata (where jwt_authn puts a verified token's payload) and local replies. Like
-- Envoy's (source/extensions/filters/http/lua/wrappers.h, the LuaDeathRef wrappers), a header or
-- body object is dead once the script yields: one taken before handle:body() fails after it, as
-- Envoy fails it ("object used outside of proper scope"); a missing header is no value, as
-- Envoy's get returns it (source/extensions/filters/http/lua/wrappers.cc HeaderMapWrapper
-- luaGet: 0 results). Iterating a header map yields its
-- entries as they were when the object was taken (this LuaJIT has no __pairs).
local function header_map(state, entries)
  local generation = state.generation
  local function live()
    if state.generation ~= generation then error("object used outside of proper scope", 3) end
  end
  local methods = {}
  -- Envoy's get returns no value at all (not nil) for a missing header.
  function methods:get(k)
    live()
    local v = entries[k]
    if v == nil then return end
    return v
  end
  function methods:replace(k, v) live() entries[k] = v rawset(self, k, v) end
  function methods:remove(k) live() entries[k] = nil rawset(self, k, nil) end
  local object = {}
  for k, v in pairs(entries) do object[k] = v end
  return setmetatable(object, {__index = methods})
end

function make_handle(headers_in, body_text, claims)
  local state = {headers = {}, body = body_text, body_read = false, generation = 0}
  for k, v in pairs(headers_in) do state.headers[k] = v end
  local metadata = {stored = {}}
  state.metadata = metadata.stored
  function metadata:get(filter)
    if filter == "envoy.filters.http.jwt_authn" and claims ~= nil then return {payload = claims} end
    return metadata.stored[filter]
  end
  function metadata:set(filter, key, value)
    metadata.stored[filter] = metadata.stored[filter] or {}
    metadata.stored[filter][key] = value
  end
  local info = {}
  function info:dynamicMetadata() return metadata end
  local handle = {state = state}
  function handle:headers() return header_map(state, state.headers) end
  function handle:body()
    -- Envoy yields here until the whole body is buffered.
    state.body_read = true
    state.generation = state.generation + 1
    if body_text == nil then return nil end
    local generation = state.generation
    local function live()
      if state.generation ~= generation then error("object used outside of proper scope", 3) end
    end
    local body = {}
    function body:length() live() return #state.body end
    function body:getBytes(i, n) live() return state.body:sub(i + 1, i + n) end
    function body:setBytes(s) live() state.body = s end
    return body
  end
  function handle:streamInfo() return info end
  function handle:respond(reply_headers, reply_body)
    state.status = reply_headers[":status"]
    state.reply = reply_body
  end
  return handle
end

-- The response phase of the same stream: its headers, and the metadata the request phase left.
function make_response_handle(request_handle, headers_in)
  local state = {headers = {}, generation = 0}
  for k, v in pairs(headers_in) do state.headers[k] = v end
  local handle = {state = state}
  function handle:headers() return header_map(state, state.headers) end
  function handle:streamInfo() return request_handle:streamInfo() end
  return handle
end

function bucket_counts(n)
  local counts = {}
  for b = 0, 99 do counts[b] = 0 end
  for i = 1, n do
    local b = GATEWAY_FILTER.bucket("user-" .. i)
    counts[b] = counts[b] + 1
  end
  return counts
end

-- The buckets the filter gives n users who name themselves only in the body's OpenAI "user"
-- (a token without a user claim), each request run through envoy_on_request.
function body_user_bucket_counts(n, model, claims)
  local counts = {}
  for b = 0, 99 do counts[b] = 0 end
  for i = 1, n do
    local body = '{"model":"' .. model .. '","messages":[{"role":"user","content":"hi"}],"user":"user-' .. i .. '"}'
    local handle = make_handle({[":method"] = "POST"}, body, claims)
    envoy_on_request(handle)
    local b = tonumber(handle.state.headers["x-user-bucket"])
    counts[b] = counts[b] + 1
  end
  return counts
end
"""


def lua_code(evaluated: Evaluated) -> str:
    """The Lua the gateway runs: taken from the rendered EnvoyFilter itself."""
    envoy_filter = evaluated.k8s("EnvoyFilter", "inference-gateway-filter", "istio-system")
    (patch,) = [p["patch"]["value"] for p in envoy_filter["spec"]["configPatches"] if p["applyTo"] == "HTTP_FILTER"]
    assert patch["typed_config"]["@type"] == "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua"
    return patch["typed_config"]["default_source_code"]["inline_string"]


def lua_runtime(evaluated: Evaluated):
    runtime = luajit.LuaRuntime(unpack_returned_tuples=True)
    assert runtime.lua_implementation.startswith("LuaJIT 2.1")  # the Lua Envoy embeds
    runtime.execute(lua_code(evaluated))
    runtime.execute(HARNESS)
    return runtime


@pytest.fixture(scope="module")
def lua(prod):
    return lua_runtime(prod)


def token(tier: str | None = None, sub: str | None = "user-123", **claims) -> dict:
    """A verified token's payload as jwt_authn hands it on (a member of prod's team-a unless the
    `tenant` claim is given)."""
    payload = {"iss": "https://login.inference.example.com", "aud": "inference-api", "tenant": "team-a", **claims}
    if tier is not None:
        payload["tier"] = tier
    if sub is not None:
        payload["sub"] = sub
    return payload


class Request:
    """One request through the filter; `claims` is the verified token's payload (by default a
    standard-tier user's; `{}` for a request without a token)."""

    def __init__(self, lua, headers: dict[str, str], body: str | None = None, claims: dict | None = None):
        if claims is None:
            claims = token()
        handle = lua.globals().make_handle(
            lua.table_from(headers), body, lua.table_from(claims, recursive=True) if claims else None
        )
        lua.globals().envoy_on_request(handle)
        self.handle, self.lua = handle, lua
        state = handle.state
        self.headers = dict(state.headers.items())
        self.body = state.body
        self.status = state.status
        self.reply = state.reply
        self.body_read = state.body_read

    def json(self) -> dict:
        return json.loads(self.body)

    def served(self) -> dict:
        """The request as the servers read it (tests/helpers.py vllm_reads): the priority header over the body."""
        return vllm_reads(self.headers, self.body)

    def response(self, headers: dict[str, str]) -> dict[str, str]:
        """The response headers the client gets once the filter's response phase ran."""
        handle = self.lua.globals().make_response_handle(self.handle, self.lua.table_from(headers))
        self.lua.globals().envoy_on_response(handle)
        return dict(handle.state.headers.items())


def fnv1a32(data: bytes) -> int:
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def test_bucket_is_fnv1a_and_stable(lua):
    keys = ["alice", "bob", "user-42", "", "Ünïcødé-user", "a" * 500, "0", "tenant/team-a:user#7"]
    for key in keys:
        assert lua.globals().GATEWAY_FILTER.fnv1a32(key) == fnv1a32(key.encode()), key
    # A fresh runtime (another gateway pod, another process) gives every key the same bucket.
    other = luajit.LuaRuntime()
    other.execute("local CONFIG = {}\n" + LUA_SOURCE.read_text())
    for key in keys:
        assert (
            other.globals().GATEWAY_FILTER.bucket(key) == lua.globals().GATEWAY_FILTER.bucket(key) == fnv1a32(key.encode()) % 100
        )


def test_same_user_same_bucket_header(lua):
    first = Request(lua, {":method": "GET"}, claims=token(sub="user-123"))
    second = Request(lua, {":method": "GET"}, claims=token(sub="user-123"))
    assert first.headers["x-user-bucket"] == second.headers["x-user-bucket"] == str(fnv1a32(b"user-123") % 100)


def test_shares_over_100k_keys_are_within_one_point_of_every_weight(lua):
    counts = lua.globals().bucket_counts(N_KEYS)
    buckets = [counts[b] for b in range(100)]
    assert sum(buckets) == N_KEYS
    for weight in range(101):
        canary_share = 100 * sum(buckets[:weight]) / N_KEYS
        assert abs(canary_share - weight) <= 1, (weight, canary_share)


def test_prod_canary_route_regex_applied_to_lua_buckets_gives_ten_percent(lua, prod):
    routes = vs(prod, "llama-8b", "serving")["spec"]["http"]
    sticky = next(r for r in routes if r["name"] == "premium-sticky-v2")
    pattern = re2.compile(sticky["match"][0]["headers"]["x-user-bucket"]["regex"])
    counts = lua.globals().bucket_counts(N_KEYS)
    canary = sum(counts[b] for b in range(100) if pattern.fullmatch(str(b)))
    assert abs(100 * canary / N_KEYS - 10) <= 1


def chat_body(**extra) -> str:
    body = {"model": "llama-3.1-8b-instruct", "messages": [{"role": "user", "content": "hi"}], **extra}
    return json.dumps(body)


def test_tier_comes_from_the_token_never_the_client(lua):
    assert Request(lua, {":method": "GET"}, claims=token()).headers["x-tier"] == "standard"
    assert Request(lua, {":method": "GET", "x-tier": "premium"}, claims=token()).headers["x-tier"] == "standard"
    assert Request(lua, {":method": "GET", "x-tier": "batch"}, claims=token(tier="premium")).headers["x-tier"] == "premium"


def test_model_header_comes_from_the_body_never_the_client(lua):
    request = Request(lua, {":method": "POST", "x-model": "llama-3.1-70b-instruct"}, chat_body())
    assert request.headers["x-model"] == "llama-3.1-8b-instruct"
    spoofed = Request(lua, {":method": "GET", "x-model": "llama-3.1-70b-instruct", "x-user-bucket": "3"}, claims=token(sub=None))
    assert "x-model" not in spoofed.headers and "x-user-bucket" not in spoofed.headers


@pytest.mark.parametrize("tier, priority", [("premium", 0), ("standard", 1)])
def test_tier_priority_written_into_the_body(lua, tier, priority):
    raw = chat_body(priority=-5, temperature=0.2)
    request = Request(lua, {":method": "POST"}, raw, claims=token(tier=tier))
    body = request.json()
    assert body["priority"] == priority and body["temperature"] == 0.2 and body["messages"][0]["content"] == "hi"
    # Appended, the client's bytes untouched: the client's priority is shadowed by ours, the last
    # member, which is the one vLLM's json.loads and the picker's encoding/json keep; the header says the same.
    assert request.body == raw[:-1] + f',"model":"llama-3.1-8b-instruct","priority":{priority}}}'
    assert request.headers["x-vllm-priority"] == str(priority) and request.served()["priority"] == priority


def test_streaming_request_body(lua):
    raw = (
        '{ "model" : "llama-3.1-70b-instruct",\n  "stream": true, "stream_options": {"include_usage": true},\n'
        '  "messages": [{"role": "user", "content": "say \\"priority\\": 0 {not json}"}] }\n'
    )
    request = Request(lua, {":method": "POST"}, raw, claims=token(tier="premium"))
    body = request.served()
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["priority"] == 0
    assert body["messages"][0]["content"] == 'say "priority": 0 {not json}'  # strings are not touched


def test_escaped_key_cannot_smuggle_a_priority(lua):
    raw = '{"model": "llama-3.1-70b-instruct", "pri\\u006frity": 0, "messages": []}'
    body = Request(lua, {":method": "POST"}, raw, claims=token(tier="standard")).served()
    assert body["priority"] == 1


def test_completions_body_with_nested_priority_fields(lua):
    raw = json.dumps({"model": "llama-3.1-70b-instruct", "prompt": "x", "metadata": {"priority": 99}})
    body = Request(lua, {":method": "POST"}, raw, claims=token(tier="standard")).served()
    assert body["metadata"] == {"priority": 99} and body["priority"] == 1


def test_client_priority_never_reaches_single_tier_servers(lua):
    # Finding 16: a single-tier (fcfs) server reads priority 0, vLLM's default, whatever the client sent.
    raw = json.dumps({"model": "batch-labeller", "prompt": "label this", "priority": -100, "metadata": {"priority": 3}})
    body = Request(lua, {":method": "POST"}, raw, claims=token(tier="batch", tenant="team-b")).served()
    assert body["priority"] == 0 and body["metadata"] == {"priority": 3} and body["prompt"] == "label this"


def test_servers_without_priority_scheduling_read_vllms_default_priority(lua):
    # The batch labeller serves one tier: vLLM's API says a non-zero priority may be refused there.
    raw = json.dumps({"model": "batch-labeller", "prompt": "label this"})
    request = Request(lua, {":method": "POST"}, raw, claims=token(tier="batch", tenant="team-b"))
    assert request.body == raw[:-1] + ',"model":"batch-labeller","priority":0}'
    assert request.headers["x-vllm-priority"] == "0" and request.headers["x-model"] == "batch-labeller"
    # The 8B chat model's batch tier goes to its batch servers, which serve one tier too.
    assert Request(lua, {":method": "POST"}, chat_body(), claims=token(tier="batch")).served()["priority"] == 0


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        "[1, 2]",
        '"{}"',
        '{"model": "llama-3.1-8b-instruct"} trailing',
        '{"model": "llama-3.1-8b-instruct"',
        "\ufeff{}",  # a byte order mark: json.loads(bytes) would take it
        '{"model": "llama-3.1-8b-instruct"}'.encode("utf-16-le").decode("latin-1"),
    ],
)
def test_bodies_that_are_not_one_json_object_are_refused(lua, raw):
    request = Request(lua, {":method": "POST"}, raw, claims=token(tier="premium"))
    assert request.status == "400" and request.body == raw and "x-model" not in request.headers


def test_user_key_header_is_per_model_and_set_from_the_token(lua, prod_raw):
    prod_raw["models"][1]["release"]["userKeyHeader"] = "x-account"
    runtime = lua_runtime(Evaluated(prod_raw))
    request = Request(
        runtime, {":method": "POST", "x-account": "forged", "x-user-id": "forged"}, chat_body(), claims=token(sub="acct-9")
    )
    assert request.headers["x-user-bucket"] == str(fnv1a32(b"acct-9") % 100)
    # The model's servers get the token's user in their header; the client's values are gone.
    assert request.headers["x-account"] == "acct-9" and "x-user-id" not in request.headers


# The sticky user from the body: a client that only sends OpenAI's `user` stays on one version.


def test_body_user_shares_over_100k_users_are_within_one_point_of_every_weight(lua, prod):
    no_user_claim = lua.table_from(token(sub=None))
    counts = lua.globals().body_user_bucket_counts(N_KEYS, "llama-3.1-8b-instruct", no_user_claim)
    buckets = [counts[b] for b in range(100)]
    assert sum(buckets) == N_KEYS
    for weight in range(101):
        assert abs(100 * sum(buckets[:weight]) / N_KEYS - weight) <= 1, weight
    # The prod canary's route regex over those buckets: its 10%.
    sticky = next(r for r in vs(prod, "llama-8b", "serving")["spec"]["http"] if r["name"] == "premium-sticky-v2")
    pattern = re2.compile(sticky["match"][0]["headers"]["x-user-bucket"]["regex"])
    assert abs(100 * sum(counts[b] for b in range(100) if pattern.fullmatch(str(b))) / N_KEYS - 10) <= 1
    # A user named in the body lands where the same user named by a token does.
    claimed = lua.globals().bucket_counts(N_KEYS)
    assert buckets == [claimed[b] for b in range(100)]


def test_the_token_user_claim_beats_the_body_user(lua):
    request = Request(lua, {":method": "POST"}, chat_body(user="bob"), claims=token(sub="alice"))
    assert request.headers["x-user-id"] == "alice" and request.headers["x-user-bucket"] == str(fnv1a32(b"alice") % 100)
    from_body = Request(lua, {":method": "POST"}, chat_body(user="bob"), claims=token(sub=None))
    assert from_body.headers["x-user-id"] == "bob" and from_body.headers["x-user-bucket"] == str(fnv1a32(b"bob") % 100)
    # The body is the servers' as the client sent it, with the filter's members appended.
    assert from_body.json()["user"] == "bob"


SCHEMA_WITH_USER = {"type": "object", "properties": {"user": {"type": "string", "enum": ["mallory"]}}}


@pytest.mark.parametrize(
    "body",
    [
        # A tools schema with a "user" property, after and before the top-level user.
        {
            "model": "llama-3.1-8b-instruct",
            "messages": [],
            "user": "carol",
            "tools": [{"type": "function", "function": {"name": "f", "parameters": SCHEMA_WITH_USER}}],
        },
        {
            "messages": [],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": SCHEMA_WITH_USER}}],
            "model": "llama-3.1-8b-instruct",
            "user": "carol",
        },
        # A nested string "user" before the top-level one, and another after it.
        {
            "messages": [{"role": "user", "content": "hi", "user": "mallory"}],
            "model": "llama-3.1-8b-instruct",
            "user": "carol",
            "metadata": {"user": "mallory"},
        },
        # "user" inside message content (escaped quotes: no member at all).
        {
            "messages": [{"role": "user", "content": 'as json: {"user": "mallory"}'}],
            "user": "carol",
            "model": "llama-3.1-8b-instruct",
        },
        # The top-level one first.
        {"user": "carol", "model": "llama-3.1-8b-instruct", "messages": [{"role": "user", "content": "hi", "user": "mallory"}]},
    ],
)
def test_a_nested_user_is_never_used_when_a_top_level_one_differs(lua, body):
    request = Request(lua, {":method": "POST"}, json.dumps(body), claims=token(sub=None))
    assert request.status is None and request.headers["x-user-id"] == "carol"
    assert request.headers["x-user-bucket"] == str(fnv1a32(b"carol") % 100)


def test_an_escaped_body_user_is_decoded(lua):
    raw = '{"model": "llama-3.1-8b-instruct", "user": "jos\\u00e9 \\"j\\" \\/ \\ud83d\\ude00", "messages": []}'
    request = Request(lua, {":method": "POST"}, raw, claims=token(sub=None))
    user = json.loads(raw)["user"]
    assert user == 'jos\u00e9 "j" / \U0001f600'
    assert request.headers["x-user-id"] == user
    assert request.headers["x-user-bucket"] == str(fnv1a32(user.encode()) % 100)


@pytest.mark.parametrize("user", ["alice\r\nx-tier: premium", "u" * 257, "", 7, None, {"id": "alice"}])
def test_an_unusable_body_user_is_not_used_and_not_refused(lua, user):
    request = Request(lua, {":method": "POST"}, chat_body(user=user), claims=token(sub=None))
    assert request.status is None and request.headers["x-model"] == "llama-3.1-8b-instruct"
    assert "x-user-bucket" not in request.headers and "x-user-id" not in request.headers


# A batch client works unchanged: a model that serves only batch takes a token without a tier
# claim as batch. (prod: batch-labeller serves team-b, llama-3.1-8b-instruct-batch serves the
# chat model's callers; both serve only the batch tier.)


@pytest.mark.parametrize("model, tenant", [("batch-labeller", "team-b"), ("llama-3.1-8b-instruct-batch", "team-a")])
def test_a_batch_only_model_takes_a_token_without_a_tier_claim_as_batch(lua, model, tenant):
    raw = json.dumps({"model": model, "prompt": "label this"})
    request = Request(lua, {":method": "POST"}, raw, claims=token(tenant=tenant))
    assert request.status is None and request.headers["x-tier"] == "batch" and request.headers["x-model"] == model
    assert request.served()["priority"] == 0  # its servers schedule fcfs
    # The response phase knows the tier too: a shed request waits batch's queue timeout.
    shed = request.response({":status": "429", "x-llm-d-request-dropped-reason": "rejected-ttl-expired"})
    assert shed == {":status": "503", "retry-after": "60", "x-llm-d-request-dropped-reason": "rejected-ttl-expired"}


@pytest.mark.parametrize("tier", ["standard", "premium"])
def test_an_explicit_tier_claim_is_never_changed(lua, tier):
    raw = json.dumps({"model": "batch-labeller", "prompt": "label this"})
    request = Request(lua, {":method": "POST"}, raw, claims=token(tier=tier, tenant="team-b"))
    # The routes answer it 403 (tier-not-served): a claim never silently changes class.
    assert request.status is None and request.headers["x-tier"] == tier


def test_models_serving_other_tiers_keep_the_default_tier_without_a_claim(lua):
    request = Request(lua, {":method": "POST"}, chat_body())
    assert request.headers["x-tier"] == "standard" and request.served()["priority"] == 1
    assert Request(lua, {":method": "GET"}).headers["x-tier"] == "standard"


def test_without_a_tier_claim_the_body_limit_is_the_tier_the_model_gives(lua):
    big = json.dumps({"model": "batch-labeller", "prompt": "x" * (5 << 20)})  # over standard's 4 MiB
    declared = {":method": "POST", "content-length": str(len(big))}
    batch = Request(lua, declared, big, claims=token(tenant="team-b"))
    assert batch.status is None and batch.headers["x-tier"] == "batch"
    standard = Request(lua, declared, big.replace("batch-labeller", "llama-3.1-8b-instruct"))
    assert standard.status == "413" and "standard tier" in standard.reply and standard.headers["x-tier"] == "standard"
    # A claimed tier is held to its own limit before the body is read.
    claimed = Request(lua, declared, big, claims=token(tier="standard", tenant="team-b"))
    assert claimed.status == "413" and not claimed.body_read
    # Over the largest limit such a request may reach: refused before it is read.
    huge = Request(lua, {":method": "POST", "content-length": str((16 << 20) + 1)}, "{}", claims=token(tenant="team-b"))
    assert huge.status == "413" and not huge.body_read


def test_the_filter_config_gives_unclaimed_tokens_batch_only_on_batch_only_models():
    prod_raw = prod_with_labeller_server()
    prod_raw["models"][2]["tiers"] = ["premium"]  # llama-1b: premium only
    plan = validate(prod_raw)
    config = gateway.filter_config(plan.config.traffic, plan.routes)
    unclaimed = {name: model["unclaimed_tier"] for name, model in config["models"].items()}
    assert unclaimed == {
        "llama-3.1-70b-instruct": "standard",
        "llama-3.1-8b-instruct": "standard",
        # Never a class above the default: the routes answer such a token 403.
        "llama-3.2-1b-instruct": "standard",
        "batch-labeller": "batch",
        "llama-3.1-8b-instruct-batch": "batch",
        # The 8B model's adapters take its own servers' tiers (premium, standard), not its batch model's.
        "llama-3.1-8b-support": "standard",
        "llama-3.1-8b-sql": "standard",
    }
    assert config["max_unclaimed_body_bytes"] == 16 << 20


# --- the VirtualServices and DestinationRules -------------------------------------------------


def route_kinds(routes: list[dict]) -> list[str]:
    return ["override" if "-override-" in r["name"] else "sticky" if "-sticky-" in r["name"] else "other" for r in routes]


def test_route_order_override_then_sticky_then_weighted(prod):
    routes = vs(prod, "llama-8b", "serving")["spec"]["http"]
    kinds = route_kinds(routes)
    first_sticky, last_override = kinds.index("sticky"), len(kinds) - 1 - kinds[::-1].index("override")
    assert last_override < first_sticky
    assert kinds.index("other") > len(kinds) - 1 - kinds[::-1].index("sticky")
    override = next(r for r in routes if r["name"] == "premium-override-v2")
    headers = override["match"][0]["headers"]
    assert headers["x-model-version"] == {"exact": "v2"}
    assert headers["x-model"] == {"exact": "llama-3.1-8b-instruct"} and headers["x-tier"] == {"exact": "premium"}
    assert override["route"][0]["destination"]["subset"] == "llama-8b-v2-premium"


def test_weights_add_up_to_100(prod):
    for model, namespace in (
        ("llama-8b", "serving"),
        ("llama-70b", "serving"),
        ("llama-1b", "team-a"),
        ("batch-labeller", "team-b"),
    ):
        for route in vs(prod, model, namespace)["spec"]["http"]:
            if "route" in route:
                weights = [d.get("weight", 100) for d in route["route"]]
                assert sum(weights) == 100, (model, route["name"])
    weighted = next(r for r in vs(prod, "llama-8b", "serving")["spec"]["http"] if r["name"] == "standard-weighted")
    assert [(d["destination"]["subset"], d["weight"]) for d in weighted["route"]] == [
        ("llama-8b-v1-standard", 90),
        ("llama-8b-v2-standard", 10),
    ]


def test_every_destination_subset_exists(prod):
    rules = [m for m in prod.manifests() if m["kind"] == "DestinationRule"]
    subsets = {(r["spec"]["host"], s["name"]) for r in rules for s in r["spec"].get("subsets", [])}
    for service in (m for m in prod.manifests() if m["kind"] == "VirtualService"):
        # HTTP routes (the tiers'), and TLS ones (a tenant's hosts through the egress gateway).
        for route in [*service["spec"].get("http", []), *service["spec"].get("tls", [])]:
            for destination in route.get("route", []):
                d = destination["destination"]
                assert "subset" not in d or (d["host"], d["subset"]) in subsets, (service["metadata"]["name"], d)


def test_knative_versions_are_reached_through_their_pickers_or_the_local_gateway_by_host(prod, staging):
    # Behind its pickers (the default), a Knative version is reached as an HPA one is: the version's picker,
    # in the tier's band, with subsets of its own in the model's namespace.
    weighted = next(r for r in vs(prod, "llama-8b", "serving")["spec"]["http"] if r["name"] == "premium-weighted")
    stable = weighted["route"][0]
    assert stable["destination"] == {
        "host": "llama-8b-v1-epp.serving.svc.cluster.local",
        "subset": "llama-8b-v1-premium",
        "port": {"number": 8081},
    }
    assert stable["headers"]["request"]["set"] == {"x-llm-d-inference-objective": "llama-8b-v1-premium"}
    rule = prod.k8s("DestinationRule", "llama-8b-v2-epp", "serving")
    assert {s["name"] for s in rule["spec"]["subsets"]} == {"llama-8b-v2-premium", "llama-8b-v2-standard"}
    # Without one (staging's labeller, which scales to zero), through Knative's local gateway by Host.
    weighted = next(r for r in vs(staging, "labeller", "team-a")["spec"]["http"] if r["name"] == "batch-weighted")
    stable = weighted["route"][0]
    assert stable["destination"]["host"] == "knative-local-gateway.istio-system.svc.cluster.local"
    assert stable["headers"]["request"]["set"]["Host"] == "labeller-v1.team-a.svc.cluster.local"
    rule = staging.k8s("DestinationRule", "knative-model-tiers", "istio-system")
    assert [s["name"] for s in rule["spec"]["subsets"]] == ["labeller-v1-batch"]


def test_tier_limits_timeouts_and_safe_retries(prod):
    # The 70B's versions sit behind endpoint pickers: each version's tier subsets are its
    # picker's pods, with the tier's connection-pool bounds, and eject nothing.
    rule = prod.k8s("DestinationRule", "llama-70b-v1-epp", "serving")
    assert rule["spec"]["host"] == "llama-70b-v1-epp.serving.svc.cluster.local"
    subsets = {s["name"]: s for s in rule["spec"]["subsets"]}
    assert set(subsets) == {"v1-premium", "v1-standard"}  # chat: premium and standard
    premium = subsets["v1-premium"]
    assert premium["labels"] == {"llm-d-router-gateway": "llama-70b-v1-epp"}
    pool = premium["trafficPolicy"]["connectionPool"]
    assert pool["http"]["http1MaxPendingRequests"] == 64 and pool["http"]["http2MaxRequests"] == 512
    assert subsets["v1-standard"]["trafficPolicy"]["connectionPool"]["http"]["http1MaxPendingRequests"] == 32
    assert all("outlierDetection" not in s["trafficPolicy"] for s in subsets.values())
    routes = {r["name"]: r for r in vs(prod, "llama-70b", "serving")["spec"]["http"]}
    assert routes["premium-weighted"]["timeout"] == "120s" and routes["standard-weighted"]["timeout"] == "300s"
    assert routes["premium-weighted"]["retries"] == {
        "attempts": 1,
        "perTryTimeout": "120s",
        "retryOn": "connect-failure,refused-stream",
    }
    batch = next(r for r in vs(prod, "batch-labeller", "team-b")["spec"]["http"] if r["name"] == "batch-weighted")
    assert batch["retries"] == {"attempts": 0} and batch["timeout"] == "600s"


def test_knative_gateway_subsets_eject_no_hosts(staging):
    # Finding 10: behind knative-local-gateway the hosts are gateway pods, not model servers.
    rule = staging.k8s("DestinationRule", "knative-model-tiers", "istio-system")
    assert rule["spec"]["subsets"]
    for subset in rule["spec"]["subsets"]:
        assert "outlierDetection" not in subset["trafficPolicy"] and subset["trafficPolicy"]["connectionPool"]


def test_tiers_a_model_does_not_serve_get_a_clear_403(prod):
    last = vs(prod, "llama-70b", "serving")["spec"]["http"][-1]
    assert last["directResponse"]["status"] == 403
    assert last["directResponse"]["body"]["string"] == (
        "model llama-3.1-70b-instruct serves tiers premium, standard; the token's tier claim names another"
    )


def test_batch_traffic_goes_to_its_own_pool(prod):
    routes = {r["name"]: r for r in vs(prod, "llama-8b", "serving")["spec"]["http"]}
    batch = routes["batch-to-llama-8b-batch"]
    assert batch["route"][0]["destination"]["host"] == "llama-8b-batch-v1-epp.serving.svc.cluster.local"
    assert not any(name.startswith("batch-override") for name in routes)
    servers = prod.k8s("Service", "llama-8b-batch-v1", "serving")
    args = servers["spec"]["template"]["spec"]["containers"][0]["args"]
    # The batch servers answer to the chat model's name too.
    assert args[args.index("--served-model-name") + 1 : args.index("--served-model-name") + 3] == [
        "llama-3.1-8b-instruct-batch",
        "llama-3.1-8b-instruct",
    ]
    assert servers["spec"]["template"]["spec"]["nodeSelector"] == {"inference.platform/pool": "l4-batch"}


def test_gateway_and_filter(prod):
    gateway = prod.k8s("Gateway", "inference-gateway", "istio-system")
    assert gateway["spec"]["selector"] == {"istio": "ingressgateway"}
    https = gateway["spec"]["servers"][0]
    assert https["tls"] == {"mode": "SIMPLE", "credentialName": "inference-api-tls"} and https["hosts"] == [
        "api.inference.example.com"
    ]
    envoy_filter = prod.k8s("EnvoyFilter", "inference-gateway-filter", "istio-system")
    patches = {p["applyTo"]: p for p in envoy_filter["spec"]["configPatches"]}
    lua = patches["HTTP_FILTER"]
    assert lua["match"]["context"] == "GATEWAY" and lua["patch"]["operation"] == "INSERT_BEFORE"
    assert lua["match"]["listener"]["filterChain"]["filter"]["subFilter"]["name"] == "envoy.filters.http.router"
    # The filter buffers bodies: the listener buffer allows 16 MiB; silent responses may last
    # as long as the longest tier timeout.
    assert patches["LISTENER"]["patch"]["value"] == {"per_connection_buffer_limit_bytes": 16 << 20}
    assert patches["NETWORK_FILTER"]["patch"]["value"]["typed_config"]["stream_idle_timeout"] == "630s"


def test_istio_installed_by_pinned_releases(prod):
    releases = {r["inputs"]["name"]: r["inputs"] for r in prod.of_type(RELEASE)}
    for name, chart in (("istio-base", "base"), ("istio-cni", "cni"), ("istiod", "istiod"), ("istio-ingressgateway", "gateway")):
        # Finding 3: 1.30.3 is the newest 1.30 release (1.30.4 was never tagged).
        assert releases[name]["chart"] == chart and releases[name]["version"] == "1.30.3"
        assert releases[name]["repositoryOpts"]["repo"] == "https://istio-release.storage.googleapis.com/charts"
    assert releases["istiod"]["values"]["pilot"]["cni"]["enabled"] is True
    assert releases["istio-ingressgateway"]["values"]["labels"]["istio"] == "ingressgateway"
    # Finding 13: the chart's default 2000m CPU limit is dropped (its helper omits empty values).
    assert releases["istio-ingressgateway"]["values"]["resources"]["limits"] == {"cpu": "", "memory": "1Gi"}


def test_isolation_policies(prod):
    for tenant in ("serving", "team-a", "team-b"):
        assert prod.k8s("PeerAuthentication", "default", tenant)["spec"] == {"mtls": {"mode": "STRICT"}}
    policy = prod.k8s("AuthorizationPolicy", "allow-gateway-and-namespace", "team-a")["spec"]
    assert policy["action"] == "ALLOW"
    assert policy["rules"] == [
        {"from": [{"source": {"principals": ["cluster.local/ns/istio-system/sa/istio-ingressgateway"]}}]},
        {"from": [{"source": {"namespaces": ["team-a"]}}]},
    ]
    # A Knative tenant admits Knative's activator by its service account, not all of knative-serving.
    knative_tenant = prod.k8s("AuthorizationPolicy", "allow-gateway-and-namespace", "serving")["spec"]
    assert knative_tenant["rules"][1] == {"from": [{"source": {"namespaces": ["serving"]}}]}
    sources = [source["source"] for rule in knative_tenant["rules"] for source in rule["from"]]
    assert {"principals": ["cluster.local/ns/knative-serving/sa/activator"]} in sources
    assert not any("knative-serving" in source.get("namespaces", []) for source in sources)


def test_promotion_then_dropping_the_old_version(prod_raw):
    release = prod_raw["models"][1]["release"]
    release["canaryWeight"] = 100
    promoted = Evaluated(prod_raw)
    weighted = next(r for r in vs(promoted, "llama-8b", "serving")["spec"]["http"] if r["name"] == "premium-weighted")
    assert [(d["destination"]["subset"], d["weight"]) for d in weighted["route"]] == [
        ("llama-8b-v1-premium", 0),
        ("llama-8b-v2-premium", 100),
    ]
    prod_raw["models"][1]["release"] = {"stable": "v2"}
    prod_raw["models"][1]["versions"] = prod_raw["models"][1]["versions"][1:]
    done = Evaluated(prod_raw)
    servers = {r["name"] for r in done.of_type("inference-platform:model-server:ModelServer")}
    assert "llama-8b-v1" not in servers and "llama-8b-v2" in servers


# --- bad inputs ---------------------------------------------------------------------------------


def test_weights_that_do_not_add_up(prod_raw):
    release = prod_raw["models"][1]["release"]
    del release["canaryWeight"]
    release["weights"] = {"v1": 85, "v2": 10}
    (message,) = config_problems(prod_raw)
    assert message == "inference-platform:models[1].release: weights add up to 95, not 100: v1=85, v2=10"


def test_weights_that_add_up_set_the_canary_weight(prod_raw):
    release = prod_raw["models"][1]["release"]
    del release["canaryWeight"]
    release["weights"] = {"v1": 75, "v2": 25}
    assert parse_platform_config(prod_raw).models[1].release.canary_weight == 25


def test_canary_naming_a_missing_version(prod_raw):
    prod_raw["models"][1]["release"]["canary"] = "v9"
    (message,) = config_problems(prod_raw)
    assert message.startswith("inference-platform:models[1].release.canary: version 'v9' is not among the model's versions")


def test_unknown_tier_on_a_model(prod_raw):
    prod_raw["models"][0]["tiers"] = ["premium", "gold"]
    (message,) = config_problems(prod_raw)
    assert message.startswith("inference-platform:models[0].tiers[1]: got 'gold'; allowed: 'premium', 'standard' or 'batch'")


def test_unknown_tier_in_traffic_policy(prod_raw):
    prod_raw["traffic"]["tiers"] = {
        "gold": {"timeout": "5s", "maxPendingRequests": 1, "maxRequests": 1, "retryAttempts": 0, "vllmPriority": 0}
    }
    found = config_problems(prod_raw)
    assert any(m.startswith("inference-platform:traffic.tiers.gold") for m in found), found


def test_batch_model_must_exist_and_serve_batch(prod_raw):
    prod_raw["models"][1]["batchModel"] = "llama-70b"
    (message,) = config_problems(prod_raw)
    assert message.startswith("inference-platform:models[1].batchModel: model 'llama-70b' does not serve the batch tier")
    prod_raw["models"][1]["batchModel"] = "nope"
    assert config_problems(prod_raw)[0].startswith("inference-platform:models[1].batchModel: unknown model 'nope'")
