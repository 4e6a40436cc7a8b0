"""The gateway filter reading request bodies (the real Lua, in LuaJIT): its fast path of plain
finds, its exact slow path, and the model and priority it appends. The servers behind it (vLLM
through json.loads, the endpoint picker through Go's encoding/json) keep the last of duplicate
member names; json.loads stands in for both here."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from .helpers import Evaluated, raw_stack
from .lua_filter import Request, lua_runtime, token

CHAT = "llama-3.1-8b-instruct"
OTHER = "llama-3.1-70b-instruct"
# The priority of the tier the default token (no tier claim) has for the chat models.
STANDARD = 1


@pytest.fixture(scope="module")
def lua():
    return lua_runtime(Evaluated(raw_stack("prod"), shared=True))


def post(lua, raw: str, **claims: Any) -> Request:
    return Request(lua, {":method": "POST"}, raw, claims=token(**claims) if claims else None)


def read_by_servers(request: Request) -> dict[str, Any]:
    """The body as vLLM reads it (json.loads: the last of duplicate names counts)."""
    return json.loads(request.body)


def tool(parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "pick", "parameters": parameters}}


MODEL_PROPERTY = {"type": "object", "properties": {"model": {"type": "string", "enum": [OTHER]}}}


@pytest.mark.parametrize(
    "body",
    [
        # A tools schema naming a "model" property, after and before the top-level model.
        {"model": CHAT, "messages": [], "tools": [tool(MODEL_PROPERTY)]},
        {"messages": [], "tools": [tool(MODEL_PROPERTY)], "model": CHAT},
        # A response_format example naming another model, before the top-level one.
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": MODEL_PROPERTY}}, "model": CHAT},
        {"metadata": {"model": OTHER}, "messages": [], "model": CHAT, "extra": [{"model": OTHER}]},
        # A nested "model" string before the top-level one, the top-level one not first.
        {"messages": [{"role": "user", "content": "hi", "model": OTHER}], "model": CHAT},
    ],
)
def test_a_nested_model_never_overrides_the_top_level_one(lua, body):
    request = post(lua, json.dumps(body))
    assert request.status is None and request.headers["x-model"] == CHAT
    assert read_by_servers(request)["model"] == CHAT and read_by_servers(request)["priority"] == STANDARD


def test_a_model_in_strings_is_no_member(lua):
    raw = json.dumps(
        {
            "messages": [{"role": "user", "content": f'reply as {{"model": "{OTHER}"}}'}],
            'a "model': OTHER,  # a member name ending in an escaped quote and `model`
            "model": CHAT,
        }
    )
    assert '\\"model\\": ' in raw and '\\"model": ' in raw
    request = post(lua, raw)
    assert request.headers["x-model"] == CHAT and read_by_servers(request)["model"] == CHAT


def test_a_model_named_first_is_the_model_the_servers_read(lua):
    # Taken without looking further: the filter appends it, so a later duplicate, plain or
    # spelt with escapes, is shadowed for the servers too.
    for raw in (
        json.dumps({"model": CHAT, "messages": []})[:-1] + f', "model": "{OTHER}"}}',
        '{"model": "%s", "messages": [], "mod\\u0065l": "%s"}' % (CHAT, OTHER),
    ):
        request = post(lua, raw)
        assert request.headers["x-model"] == CHAT and read_by_servers(request)["model"] == CHAT, raw


def test_duplicate_top_level_models_are_read_as_the_servers_read_them(lua):
    # Neither first: the exact scan takes the last top-level one, as json.loads does.
    raw = '{"messages": [], "model": "%s", "n": 1, "model": "%s"}' % (OTHER, CHAT)
    request = post(lua, raw)
    assert request.headers["x-model"] == CHAT == json.loads(raw)["model"] == read_by_servers(request)["model"]


def test_a_sole_nested_model_is_the_model_everyone_reads(lua):
    # No top-level model: the filter takes the one there is and appends it, so the servers serve
    # the very model the header routed to and the tenant check allowed.
    raw = json.dumps({"messages": [{"role": "user", "content": "hi", "model": CHAT}]})
    request = post(lua, raw)
    assert request.headers["x-model"] == CHAT and read_by_servers(request)["model"] == CHAT


def test_a_model_spelt_with_escapes_alone_is_no_model(lua):
    # Nothing routes without the model header (no route matches): it fails closed.
    raw = '{"mod\\u0065l": "%s", "messages": []}' % CHAT
    request = post(lua, raw)
    assert request.status is None and "x-model" not in request.headers and request.body == raw


@pytest.mark.parametrize(
    "raw, reason",
    [
        ('{"model": "' + "m" * 257 + '", "messages": []}', "at most 256 bytes"),
        ('{"messages": [], "model": "' + "m" * 257 + '"}', "at most 256 bytes"),
        ('{"model": "llama-3.1-8b-instruct\\r\\nx-tier: premium"}', "control characters"),
        ('{"model": "llama-3.1-8b-instruct\\u0000"}', "control characters"),
        ('{"model": "unterminated}', "at most 256 bytes"),
    ],
)
def test_model_names_that_cannot_be_header_values_are_refused(lua, raw, reason):
    request = post(lua, raw)
    assert request.status == "400" and reason in request.reply and "x-model" not in request.headers


# --- the slow path: exact, capped, refuses what is malformed -----------------------------------

# Every body here names the model twice, neither first: the exact scan reads it.
NESTED_FIRST = '{"metadata": {"model": "x"}, '


@pytest.mark.parametrize(
    "raw",
    [
        NESTED_FIRST + '"model": "llama-3.1-8b-instruct", "messages": [}',
        NESTED_FIRST + '"model": "llama-3.1-8b-instruct", "messages": [{"role": "user"]]}',
        NESTED_FIRST + '"model": "llama-3.1-8b-instruct", "n": tru}',
        NESTED_FIRST + '"model": "llama-3.1-8b-instruct" "n": 1}',
        NESTED_FIRST + '"model": "llama-3.1-8b-instruct", n: 1}',
        NESTED_FIRST + '"model": "llama-3.1-8b-instruct", "nested": ' + "[" * 65 + "]" * 65 + "}",
        NESTED_FIRST + '"' + "k" * 257 + '": 1, "model": "llama-3.1-8b-instruct"}',
        NESTED_FIRST + '"model": "llama-3.1-8b-instruct"} {"model": "llama-3.1-70b-instruct"}',
        NESTED_FIRST + ", ".join(f'"k{i}": {i}' for i in range(130)) + ', "model": "llama-3.1-8b-instruct"}',
    ],
)
def test_the_slow_path_refuses_malformed_or_over_cap_bodies(lua, raw):
    request = post(lua, raw, tier="premium")
    assert request.status == "400", raw[:80]
    assert request.body == raw and "x-model" not in request.headers


def test_the_slow_path_reads_up_to_its_caps(lua):
    raw = NESTED_FIRST + ", ".join(f'"k{i}": [{i}]' for i in range(126)) + ', "model": "llama-3.1-8b-instruct"}'
    request = post(lua, raw)
    assert request.status is None and request.headers["x-model"] == CHAT and read_by_servers(request)["k125"] == [125]


def test_the_fast_path_has_no_member_cap(lua):
    # What such a body costs the servers to parse is bounded by the tier's size limit.
    raw = json.dumps({"model": CHAT, **{f"k{i}": i for i in range(1000)}})
    request = post(lua, raw)
    assert request.status is None and request.headers["x-model"] == CHAT


# --- a body the servers refuse stays refused -----------------------------------------------------

MALFORMED = [
    '{"model": "llama-3.1-8b-instruct", "messages": [}',
    '{"model": "llama-3.1-8b-instruct", "messages": [{"role": "user"]]}',
    '{"model": "llama-3.1-8b-instruct", "n": tru}',
    '{"model": "llama-3.1-8b-instruct" "n": 1}',
    '{"model": "llama-3.1-8b-instruct", n: 1}',
    '{"model": "llama-3.1-8b-instruct", "unterminated": "x}',
    '{"model": "llama-3.1-8b-instruct", "dangling": "\\}',
    '{"model": "llama-3.1-8b-instruct", "priority":}',
    '{"model": "llama-3.1-8b-instruct", "a": 1,}',
    '{"model": "llama-3.1-8b-instruct", "a": {"b": 1}',
    '{"model": "llama-3.1-8b-instruct"} {"model": "llama-3.1-70b-instruct"}',
    '{"model": "llama-3.1-8b-instruct"}, {"priority": 0}',
]


@pytest.mark.parametrize("raw", MALFORMED)
def test_malformed_bodies_the_fast_path_passes_stay_malformed(lua, raw):
    with pytest.raises(ValueError):
        json.loads(raw)
    request = post(lua, raw)
    assert request.status is None
    with pytest.raises(ValueError):
        read_by_servers(request)


def mutations(raw: str, rng: random.Random) -> list[str]:
    """Bodies a byte or two away from a valid one: dropped, doubled and replaced bytes, with the
    structural and string bytes that matter most."""
    alphabet = '{}[]",:\\ 0a'
    out = []
    for _ in range(300):
        chars = list(raw)
        for _ in range(rng.randint(1, 2)):
            i = rng.randrange(1, len(chars) - 1)
            action = rng.randrange(3)
            if action == 0:
                del chars[i]
            elif action == 1:
                chars.insert(i, rng.choice(alphabet))
            else:
                chars[i] = rng.choice(alphabet)
        out.append("".join(chars))
    return out


def test_whatever_the_servers_accept_ends_with_the_filters_model_and_priority(lua):
    # The filter appends before the final '}' without checking the body is JSON: whenever the
    # result is JSON at all, its last model and priority are the filter's.
    rng = random.Random(13)
    seeds = [
        json.dumps({"model": CHAT, "messages": [{"role": "user", "content": 'say "priority": 0 }'}], "priority": -5}),
        json.dumps({"messages": [{"role": "user", "content": "{}"}], "model": CHAT, "metadata": {"priority": 9}}),
        '{"model":"%s","x":"\\\\","y":{"model":"%s","priority":-1}}' % (CHAT, OTHER),
    ]
    accepted = 0
    for seed in seeds:
        for raw in mutations(seed, rng):
            request = post(lua, raw)
            if request.status is not None or request.body == raw:
                continue
            try:
                body = read_by_servers(request)
            except ValueError:
                continue
            accepted += 1
            assert isinstance(body, dict) and body["priority"] == STANDARD, raw
            assert body["model"] == request.headers["x-model"], raw
    assert accepted > 100  # the property was exercised


def random_json(rng: random.Random, depth: int) -> Any:
    names = ["model", "user", "priority", "messages", "content", "a", 'q"model', "model\\"]
    kind = rng.randrange(6 if depth < 4 else 3)
    if kind == 0:
        return rng.choice([f"{CHAT}", OTHER, 'say "model": 1', "\\n{}", "", "é\u2019"])
    if kind == 1:
        return rng.choice([0, -3, 1.5, True, None])
    if kind == 2:
        return rng.choice(["model", "user", "priority"])
    if kind == 3:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(names): random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def test_random_bodies_are_read_as_the_servers_read_them(lua):
    rng = random.Random(7)
    for _ in range(400):
        members = [
            (rng.choice(["messages", "metadata", "tools", "user", "priority", "n"]), random_json(rng, 1))
            for _ in range(rng.randint(0, 4))
        ]
        members.insert(rng.randint(0, len(members)), ("model", CHAT))
        if rng.random() < 0.3:
            members.insert(rng.randint(0, len(members)), ("model", OTHER))
        raw = "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in members) + "}"
        top_level = json.loads(raw)["model"]
        first = members[0] == ("model", CHAT) or members[0] == ("model", OTHER)
        request = post(lua, raw)
        assert request.status is None, (raw, request.reply)
        # The model everyone reads: the servers' own top-level reading, except when the model is
        # named first (then the first one, which the filter makes the servers' reading too).
        expected = members[0][1] if first else top_level
        assert request.headers["x-model"] == expected == read_by_servers(request)["model"], raw
        assert read_by_servers(request)["priority"] == STANDARD
