"""Benchmark the gateway filter (not a test: figures go into the README).

Runs the prod stack's rendered filter (the Lua inside the EnvoyFilter of the offline preview's
evaluation) in LuaJIT with the tests' Envoy handle (tests/lua_filter.py HARNESS), on realistic
OpenAI chat bodies of 1 KB, 100 KB and 1 MB, and compares it with a floor on the same bodies and
handle: a filter that only reads the body (body:getBytes) and finds the "model" member's value.
Floor and filter run alternately in one process, so each ratio comes from the same conditions.

A body: a system prompt with a RAG context (paragraphs with many \\n, quoted phrases as \\",
typographic characters as \\u escapes, numbers), a few user and assistant turns, a tools array
with JSON schemas, and the usual sampling members. Clients put "model" first (curl examples, most
hand-written clients, Go's go-openai) or after the messages (openai-python: messages, model, then
the rest); both are measured, and a token without a user claim whose user is the body's "user".

    .venv/bin/python benchmarks/bench_filter.py [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import lupa.luajit21 as luajit  # noqa: E402

from tests.helpers import Evaluated, raw_stack  # noqa: E402
from tests.lua_filter import HARNESS, lua_code  # noqa: E402

SIZES = {"1 KB": 1 << 10, "100 KB": 100 << 10, "1 MB": 1 << 20}
MODEL = "llama-3.1-8b-instruct"  # prod: schedules by priority, so the filter rewrites the body
HEADERS = {":method": "POST", ":path": "/v1/chat/completions", "content-type": "application/json"}
# A standard-tier user of team-a, as jwt_authn hands the verified payload on.
CLAIMS = {"iss": "https://login.inference.example.com", "aud": "inference-api", "tenant": "team-a", "sub": "user-123"}


@dataclass(frozen=True)
class Case:
    label: str
    model_first: bool
    # A token without a user claim: the filter reads the body's "user" too.
    user_in_body: bool = False

    @property
    def claims(self) -> dict[str, str]:
        return {k: v for k, v in CLAIMS.items() if not (self.user_in_body and k == "sub")}


CASES = (
    Case("model first", model_first=True),
    Case("model after messages", model_first=False),
    Case("model after messages, user in body", model_first=False, user_in_body=True),
)


def floor_lua(name: str) -> str:
    """The floor as a Lua request function called `name`: read the body as the filter must, and
    find the model's value; nothing else (benchmarks/bench_gateway.py runs it in Envoy too)."""
    return f"""
function {name}(handle)
  local body = handle:body()
  local text = body:getBytes(0, body:length())
  local k = text:find('"model"', 1, true)
  local _, _, model = text:find('^%s*:%s*"([^"]*)"', k + 7)
  handle:headers():replace("x-model", model)
end
"""


FLOOR = (
    floor_lua("floor_on_request")
    + """
function run(on_request, n, headers, body, claims)
  for _ = 1, n do on_request(make_handle(headers, body, claims)) end
end
"""
)

WORDS = (
    "the of and to in is that for it as with was on be by this are from or an at which have not "
    "model request latency tokens cluster gateway priority tenant batch throughput server policy "
    "document section table figure result value customer order invoice region service account "
    "payment contract clause period notice party agreement shall include provided however"
).split()
TYPOGRAPHY = ["\u2019", "\u201c", "\u201d", "\u2014", "\u00e9", "\u00b0"]


def paragraph(rng: random.Random) -> str:
    sentences = []
    for _ in range(rng.randint(3, 7)):
        words = [rng.choice(WORDS) for _ in range(rng.randint(8, 22))]
        if rng.random() < 0.4:
            i = rng.randrange(len(words))
            words[i] = f'"{words[i]}"'
        if rng.random() < 0.3:
            words.append(str(rng.randint(1, 99999)))
        if rng.random() < 0.15:
            words.append(rng.choice(TYPOGRAPHY))
        sentences.append(" ".join(words).capitalize() + ".")
    return " ".join(sentences)


def rag_context(n_bytes: int, seed: int) -> str:
    """Retrieved documents as a RAG prompt holds them, n_bytes long before JSON escaping."""
    rng = random.Random(seed)
    parts, size, doc = [], 0, 0
    while size < n_bytes:
        doc += 1
        block = f'Document {doc} (source: "handbook-{doc}.pdf", page {rng.randint(1, 300)}):\n'
        block += "\n".join(paragraph(rng) for _ in range(rng.randint(1, 3))) + "\n\n"
        parts.append(block)
        size += len(block)
    return "".join(parts)[:n_bytes]


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_documents",
            "description": "Search the knowledge base and return the passages that answer a question.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to search for."},
                    "top_k": {"type": "integer", "minimum": 1, "maximum": 50},
                    "filters": {
                        "type": "object",
                        "properties": {"source": {"type": "string"}, "after": {"type": "string", "format": "date"}},
                    },
                },
                "required": ["query"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "create_ticket",
            "description": "Open a support ticket for the customer.",
            "parameters": {
                "type": "object",
                "properties": {
                    "title": {"type": "string"},
                    "severity": {"type": "string", "enum": ["low", "medium", "high"]},
                    "body": {"type": "string"},
                },
                "required": ["title", "body"],
            },
        },
    },
]
TURNS = [
    {"role": "user", "content": "What does the contract say about the notice period?"},
    {"role": "assistant", "content": 'Section 4 says: "either party may end it with 30 days\u2019 notice".'},
    {"role": "user", "content": 'And for the "payment" terms?\nList them.'},
]


def chat_body(n_bytes: int, case: Case, seed: int = 7) -> str:
    """A chat completion body of at most n_bytes, serialised as openai-python does (json.dumps)."""
    small = n_bytes < 4096  # a 1 KB request has one turn and no tools

    def build(context_bytes: int) -> str:
        system = "You answer from the documents below. Quote them.\n\n" + rag_context(context_bytes, seed)
        messages = [{"role": "system", "content": system}, *(TURNS[-1:] if small else TURNS)]
        rest: dict[str, Any] = {"max_tokens": 512, "temperature": 0.2, "stream": True}
        if not small:
            rest |= {"tools": TOOLS, "tool_choice": "auto"}
        if case.user_in_body:
            rest["user"] = "user-123"
        if case.model_first:
            return json.dumps({"model": MODEL, "messages": messages, **rest})
        return json.dumps({"messages": messages, "model": MODEL, **rest})

    # The longest context that fits (escaping makes the text longer in the body).
    low, high = 0, n_bytes
    while low < high:
        middle = (low + high + 1) // 2
        if len(build(middle)) <= n_bytes:
            low = middle
        else:
            high = middle - 1
    return build(low)


def prod_filter() -> str:
    return lua_code(Evaluated(raw_stack("prod")))


def runtime(code: str):
    lua = luajit.LuaRuntime(unpack_returned_tuples=True)
    lua.execute(code)
    lua.execute(HARNESS)
    lua.execute(FLOOR)
    return lua


def check(lua, body: str, case: Case) -> None:
    """The filter takes the body as a standard-tier request for MODEL from user-123 and writes the
    tier's priority, the floor finds the model: the benchmark times the paths it means to."""
    g = lua.globals()
    handle = g.make_handle(lua.table_from(HEADERS), body, lua.table_from(case.claims))
    g.envoy_on_request(handle)
    state = handle.state
    assert state.status is None, state.reply
    assert state.headers["x-model"] == MODEL and state.headers["x-user-id"] == "user-123"
    assert json.loads(state.body)["priority"] == 1
    floor = g.make_handle(lua.table_from(HEADERS), body, lua.table_from(case.claims))
    g.floor_on_request(floor)
    assert floor.state.headers["x-model"] == MODEL


def per_request_seconds(lua, on_request, body: str, claims, n: int) -> float:
    started = time.perf_counter()
    lua.globals().run(on_request, n, lua.table_from(HEADERS), body, claims)
    return (time.perf_counter() - started) / n


def measure(lua, body: str, case: Case, rounds: int) -> tuple[float, float]:
    """Median seconds per request of the floor and of the filter, in alternating batches."""
    g = lua.globals()
    claims = lua.table_from(case.claims)
    n = max(20, min(20_000, (40 << 20) // len(body)))
    for on_request in (g.floor_on_request, g.envoy_on_request):  # warm the JIT
        per_request_seconds(lua, on_request, body, claims, n)
    floors, filters = [], []
    for _ in range(rounds):
        floors.append(per_request_seconds(lua, g.floor_on_request, body, claims, n))
        filters.append(per_request_seconds(lua, g.envoy_on_request, body, claims, n))
    return statistics.median(floors), statistics.median(filters)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    lua = runtime(prod_filter())
    print(f"Gateway filter (prod stack) and floor per request, {lua.lua_implementation}, median of {args.rounds} batches:\n")
    print("| body | model placement | floor (read body, find model) | filter | ratio |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for label, size in SIZES.items():
        for case in CASES:
            body = chat_body(size, case)
            check(lua, body, case)
            floor, filtered = measure(lua, body, case, args.rounds)
            print(f"| {label} | {case.label} | {floor * 1e6:.1f} µs | {filtered * 1e6:.1f} µs | {filtered / floor:.1f}x |")


if __name__ == "__main__":
    main()
