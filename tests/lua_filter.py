"""The gateway filter's real Lua source run in LuaJIT, for the tests of the filter (tests/test_gateway_filter.py
and the modules beside it): the code the rendered EnvoyFilter carries, a harness standing in for Envoy's
stream handle, one request through both."""

from __future__ import annotations

import json

import lupa.luajit21 as luajit

from .helpers import Evaluated, vllm_reads

N_KEYS = 100_000

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


def chat_body(**extra) -> str:
    body = {"model": "llama-3.1-8b-instruct", "messages": [{"role": "user", "content": "hi"}], **extra}
    return json.dumps(body)
