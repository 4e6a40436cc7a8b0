"""The gateway filter's real Lua source run in LuaJIT (tests/lua_filter.py): sticky buckets, tiers and
priorities from the token, the model from the body, the user from the token or the body, body limits."""

from __future__ import annotations

import json

import lupa.luajit21 as luajit
import pytest

from components.specs import gateway
from components.specs.gateway import LUA_SOURCE

from .helpers import Evaluated, prod_with_labeller_server, split_module_value, validate
from .lua_filter import N_KEYS, Request, chat_body, fnv1a32, lua_runtime, token


@pytest.fixture(scope="module")
def prod() -> Evaluated:
    return split_module_value("tests/test_traffic.py prod", lambda: Evaluated(prod_with_labeller_server(), shared=True))


@pytest.fixture(scope="module")
def lua(prod):
    return lua_runtime(prod)


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
