-- Inference gateway request filter (Envoy HTTP Lua filter, LuaJIT), on the Istio ingress gateway.
--
-- The platform prepends `local CONFIG = {...}` generated from the stack config:
--   tier_header, default_tier, bucket_header, model_header,
--   tier_claim, user_claim                    claims of the verified token naming the tier and user
--   tenant_claim                              claim naming the caller's tenant(s); nil: no tenant scoping
--   user_headers = {["x-user-id"] = true}     every header a model's servers receive the user in
--   priorities = {premium = 0, ...}           vLLM priority per tier (lower is served first)
--   priority_header                           the header vLLM reads the priority from (x-vllm-priority)
--   max_body_bytes = {premium = 4194304, ...} largest request body per tier
--   max_unclaimed_body_bytes                  largest body of a token without a tier claim, before
--                                             its model (and so its tier) is known
--   max_user_bytes                            longest user id, from the token or the body
--   max_model_name_bytes                      longest model name (it becomes a header value)
--   max_members, max_member_name_bytes, max_depth   caps on the exact body scan (the slow path)
--   models = {["served-name"] = {name_json = '"served-name"', user_key_header = "x-user-id",
--             priority_tiers = {premium = true}, unclaimed_tier = "standard", tenants = {["team-a"] = true}}}
--             (a LoRA adapter's entry names its module in name_json, and an adapter with a canary has
--             adapter_canary = {override_header = "x-model-version", modules = {r2 = '"name@r2"', ...},
--             stable_json = '"name@r1"', canary_json = '"name@r2"', canary_weight = 10})
--   owned_headers = {["x-tier"] = true, ...}  the headers this filter sets (tier, bucket, model, user keys)
--   control_header_prefixes = {"x-llm-d-", ...}   prefixes of every request header another component
--                                             acts on (the endpoint pickers, vLLM): none is the client's
--   shed_status_header                        the header an endpoint picker's refusal carries
--   fairness_header                           the header naming the picker flow (the calling tenant)
--   retry_after = {premium = 5, ...}          seconds a shed request of a tier is told to wait
--
-- It runs after Envoy's jwt_authn and RBAC filters (Istio puts them first; this filter sits just
-- before the router), so every request here carries a verified token. For every request it
--   1. removes every client value of the headers it owns (tier, bucket, model, user keys) and of
--      every header under a prefix another component acts on (the endpoint pickers' objective,
--      fairness id, destination endpoint, model rewrite and queue TTL; vLLM's priority): nothing
--      a client sends selects a tier, a version split bucket, a user, a queue priority, a queue
--      time or a server;
--   2. takes the tier and the user from the verified token's payload, which jwt_authn stores as
--      dynamic metadata (Istio: payload_in_metadata "payload"). A tier claim naming no tier is
--      refused (403: a token must not silently change class), and a claimed tier is never
--      changed (a model that does not serve it answers 403 from its routes). Without a tier
--      claim the tier is the model's `unclaimed_tier`: batch for a model that serves only the
--      batch tier, so a batch client works unchanged, else the default tier. A user claim that
--      is present but no usable header value (control characters, over max_user_bytes) is
--      refused (403);
--   3. for a POST: refuses a body over the tier's limit (413), by content-length before reading it
--      (without a tier claim: the larger limit the tier may still become) and by length once the
--      model, and so the tier, is known; refuses a body whose first non-whitespace byte is not '{'
--      or whose last is not '}' (400). It does not otherwise check that the body is JSON: the
--      servers behind it refuse what is not with 400 ("Reading the body"), and for every body
--      they accept, what they read is what the filter read. Only the slow path still refuses
--      malformed bodies and holds the max_members, max_member_name_bytes and max_depth caps; what
--      a body costs the servers to parse is bounded by the tier's size limit (as before: the caps
--      never bounded an array's length);
--   4. reads the top-level OpenAI "model" from the body and sets the model header routes match on;
--      a model name over max_model_name_bytes or with control characters is refused (400); a model
--      of the platform whose tenants the token's tenant claim does not name is refused (403);
--   5. computes a stable bucket 0..99 from the user with FNV-1a (32 bit), never a per-process
--      seeded hash, so a user always lands on the same side of a canary, and passes the user to the
--      model's servers in its user-key header. Without a user claim the user is the body's
--      top-level OpenAI "user" when that is a usable header value (an unusable one is ignored,
--      not refused), so a client that only sends `user` stays on one version; a claim always wins;
--   6. for a model of the platform, sets the priority header (the client's was stripped in 1), which
--      vLLM 0.33.0's generate endpoints read over the body's `priority`: the tier's priority where
--      the model's servers schedule by priority, else 0, vLLM's default, which it ignores under fcfs
--      (vllm/v1/core/sched/request_queue.py); and appends the model and the same priority as the
--      body's last members (with_model_and_priority_last; for a LoRA adapter, the model is its
--      module: `adapter_module` picks an adapter canary's revision), which the servers read over
--      anything the client sent: the pooling endpoints read the priority only from the body
--      (vllm/entrypoints/pooling/base/protocol.py), and servers answering to several names (adapters,
--      another model's batch tier) serve the very model the filter checked. (Forwarding the body
--      untouched where neither holds was built and measured: 1.37x-1.56x the floor at 1 MB in the
--      real Envoy against 1.10x-1.15x with the append, so the filter appends for every model.) A
--      client's priority is never the platform's tier.
--
-- On the response: an endpoint picker that sheds a request (queue TTL or limit reached) answers
-- 429 with `x-llm-d-request-dropped-reason` (llm-d-router v0.10.0 pkg/common/error/error.go,
-- pkg/epp/requestcontrol/admission.go) and no Retry-After; the gateway answers it, and every
-- other 503 without a Retry-After, as 503 with `Retry-After: <the tier's queue timeout>`, the
-- platform's contract for "overloaded, retry".
--
-- Reading the body. Who reads it after the gateway, and how (checked at these versions):
--   vLLM 0.33.0: FastAPI parses the request model (vllm/entrypoints/openai/chat_completion/
--     api_router.py); FastAPI 0.136.3 (pinned in vLLM's requirements/test/cuda.txt) takes it from
--     Starlette 1.3.1's Request.json() (fastapi/routing.py), Python's json.loads
--     (starlette/requests.py): malformed JSON is refused with 400, and of duplicate member names
--     the last one counts.
--   llm-d-router v0.10.0's endpoint picker: its OpenAI parser unmarshals the body into a Go map
--     with encoding/json (pkg/epp/framework/plugins/requesthandling/parsers/openai/openai.go,
--     ParseRequest): malformed JSON is refused with 400 (pkg/epp/handlers/server.go), the last of
--     duplicate names counts, and the map is serialised again before the body goes on
--     (pkg/epp/requestcontrol/director.go, repackage), one member per name.
-- The fast path reads a member by name with plain string finds, linear in the body and with no
-- per-member work: the occurrences of `"name"` whose opening quote is not escaped and which
-- whitespace and ':' follow. In a JSON text each is a member name, at some depth: an unescaped
-- quote followed by the name's letters cannot close a string (the letters would stand outside any
-- string), so it opens one holding just the name, and only a member name is followed by ':'. The
-- first occurrence is taken when it is the only one, or (for "model") when it is the body's first
-- member, right after the opening '{': then it is top-level, and the servers read it whatever
-- comes later because the filter appends it last. Otherwise (a name twice, neither first) the
-- exact scan of the top-level members decides (`members`, the slow path; the last top-level one
-- counts, as for the servers). So a nested "model" never overrides a top-level one spelt plainly.
-- A body that spells its top-level name with \u escapes and holds a plain nested one gets the
-- nested one, and so do the servers (the appended model); a nested "user" only ever picks the
-- client's own bucket.

-- Where jwt_authn puts the verified payload: its filter name, and the key Istio configures
-- (istio/istio 1.30.3 pilot/pkg/xds/filters/filters.go: EnvoyJwtFilterPayload = "payload"), read
-- with streamInfo():dynamicMetadata():get() (envoyproxy/envoy docs/root/configuration/http/
-- http_filters/lua_filter.rst).
local JWT_METADATA = "envoy.filters.http.jwt_authn"
local JWT_PAYLOAD = "payload"
-- Where the request phase leaves the tier for the response phase (this filter's own namespace).
local GATEWAY_METADATA = "inference.gateway"
-- The priority written for servers without priority scheduling: vLLM 0.33.0's default
-- (vllm/entrypoints/openai/chat_completion/protocol.py, `priority: int = 0`).
local FCFS_PRIORITY = 0
-- A JSON \u escape is 6 bytes for at least one byte of text: a string of at most n bytes of text
-- is at most 6n bytes in the body.
local MAX_ESCAPED_BYTES_PER_BYTE = 6

local bit = require("bit")
-- LuaJIT's FFI and string buffers (both in the LuaJIT 2.1 Envoy embeds) for writing the body back.
local ffi = require("ffi")
local BODY_BUFFER = require("string.buffer").new()

local OPEN_BRACE, CLOSE_BRACE, QUOTE, BACKSLASH, COLON = 123, 125, 34, 92, 58
local WHITESPACE = { [32] = true, [9] = true, [10] = true, [13] = true }

local TWO_32 = 4294967296
local FNV_OFFSET = 2166136261

-- FNV-1a, 32 bit. The multiply by the prime 16777619 (= 2^24 + 403) is done modulo 2^32 with
-- doubles only: every intermediate stays below 2^53, so LuaJIT and plain Lua agree exactly.
local function fnv1a32(text)
  local hash = FNV_OFFSET
  for i = 1, #text do
    hash = bit.bxor(hash, text:byte(i))
    if hash < 0 then hash = hash + TWO_32 end
    hash = ((hash % 256) * 16777216 + hash * 403) % TWO_32
  end
  return hash
end

local function bucket(key)
  return fnv1a32(key) % 100
end

-- The index of the first byte at or after i that is not JSON whitespace. (Byte loops and plain
-- finds here, not Lua patterns: LuaJIT compiles those, and the filter runs on every request.)
local function skip_ws(s, i)
  while WHITESPACE[s:byte(i)] do i = i + 1 end
  return i
end

-- Whether a text holds a control character (an escaped CR or LF must not split a header).
local function has_control_character(text)
  for i = 1, #text do
    local b = text:byte(i)
    if b < 32 or b == 127 then return true end
  end
  return false
end

-- A minimal JSON scanner: just enough to find the top-level members of an object without
-- decoding the (possibly large) values.

-- Whether the quote at i is escaped: an odd run of backslashes before it. (Backslashes occur
-- only inside strings, where each run pairs up from its first one.)
local function escaped(s, i)
  local j = i - 1
  while s:byte(j) == BACKSLASH do j = j - 1 end
  return (i - 1 - j) % 2 == 1
end

-- The index after the JSON string whose opening quote is at i; nil when it is not terminated.
local function scan_string(s, i)
  local k = i
  repeat
    k = s:find('"', k + 1, true)
    if k == nil then return nil end
  until not escaped(s, k)
  return k + 1
end

local CLOSING = { ["{"] = "}", ["["] = "]" }
local LITERALS = { ["true"] = true, ["false"] = true, ["null"] = true }

-- The index after the JSON value starting at i, or nil when it is malformed: brackets must pair
-- up and nest at most CONFIG.max_depth deep (the open brackets are the only state kept), a bare
-- value must be true, false, null or a number.
local function scan_value(s, i)
  local c = s:sub(i, i)
  if c == '"' then return scan_string(s, i) end
  if CLOSING[c] ~= nil then
    local open, j = {}, i
    while true do
      local k = s:find('[{}%[%]"]', j)
      if k == nil then return nil end
      local ch = s:sub(k, k)
      if ch == '"' then
        j = scan_string(s, k)
        if j == nil then return nil end
      elseif CLOSING[ch] ~= nil then
        if #open >= CONFIG.max_depth then return nil end
        open[#open + 1] = CLOSING[ch]
        j = k + 1
      else
        if open[#open] ~= ch then return nil end
        open[#open] = nil
        j = k + 1
        if #open == 0 then return j end
      end
    end
  end
  local _, e = s:find("^[%w%.%+%-]+", i)
  if e == nil then return nil end
  local literal = s:sub(i, e)
  if LITERALS[literal] == nil and literal:find("^%-?%d+%.?%d*[eE]?[%+%-]?%d*$") == nil then return nil end
  return e + 1
end

local ESCAPES = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }

local function utf8(code)
  if code < 0x80 then return string.char(code) end
  if code < 0x800 then
    return string.char(0xC0 + math.floor(code / 64), 0x80 + code % 64)
  end
  if code < 0x10000 then
    return string.char(0xE0 + math.floor(code / 4096), 0x80 + math.floor(code / 64) % 64, 0x80 + code % 64)
  end
  return string.char(
    0xF0 + math.floor(code / 262144),
    0x80 + math.floor(code / 4096) % 64,
    0x80 + math.floor(code / 64) % 64,
    0x80 + code % 64
  )
end

-- The text of a JSON string literal (without its quotes), escapes decoded; a surrogate pair is
-- one character, as JSON parsers read it.
local function decode_string(raw)
  if raw:find("\\", 1, true) == nil then return raw end
  local out, i = {}, 1
  while i <= #raw do
    local c = raw:sub(i, i)
    if c ~= "\\" then
      out[#out + 1] = c
      i = i + 1
    elseif raw:sub(i + 1, i + 1) == "u" then
      local code = tonumber(raw:sub(i + 2, i + 5), 16)
      if code == nil then return raw end
      i = i + 6
      local low = raw:sub(i, i + 1) == "\\u" and tonumber(raw:sub(i + 2, i + 5), 16)
      if code >= 0xD800 and code < 0xDC00 and low and low >= 0xDC00 and low < 0xE000 then
        code = 0x10000 + (code - 0xD800) * 1024 + (low - 0xDC00)
        i = i + 6
      end
      out[#out + 1] = utf8(code)
    else
      local e = raw:sub(i + 1, i + 1)
      out[#out + 1] = ESCAPES[e] or e
      i = i + 2
    end
  end
  return table.concat(out)
end

-- Top-level members of a JSON object: a list of {key, first, value_first, value_last}, and the
-- index of the closing brace. On failure: nil, the reason, and the index the scan stopped at.
-- The work is linear in the body and stops after CONFIG.max_members members: a body of a million
-- tiny members is refused after scanning the first few hundred bytes.
local function members(s)
  local i = skip_ws(s, 1)
  if s:sub(i, i) ~= "{" then return nil, "the body is not a JSON object", i end
  local list = {}
  i = skip_ws(s, i + 1)
  if s:sub(i, i) == "}" then return list, i end
  while true do
    if #list >= CONFIG.max_members then
      return nil, string.format("the body has more than %d top-level members", CONFIG.max_members), i
    end
    if s:sub(i, i) ~= '"' then return nil, "a member name is not a string", i end
    local key_end = scan_string(s, i)
    if key_end == nil then return nil, "a member name is not terminated", i end
    if key_end - i - 2 > CONFIG.max_member_name_bytes then
      return nil, string.format("a member name is longer than %d bytes", CONFIG.max_member_name_bytes), i
    end
    local key = decode_string(s:sub(i + 1, key_end - 2))
    local first = i
    i = skip_ws(s, key_end)
    if s:sub(i, i) ~= ":" then return nil, "a member has no ':'", i end
    i = skip_ws(s, i + 1)
    local value_first = i
    local value_end = scan_value(s, i)
    if value_end == nil then return nil, "a member value is malformed", i end
    list[#list + 1] = { key = key, first = first, value_first = value_first, value_last = value_end - 1 }
    i = skip_ws(s, value_end)
    local c = s:sub(i, i)
    if c == "}" then
      -- One object and nothing after it: a second object would be read differently by the server.
      if skip_ws(s, i + 1) <= #s then return nil, "the body goes on after its JSON object", i end
      return list, i
    end
    if c ~= "," then return nil, "members are not separated by ','", i end
    i = skip_ws(s, i + 1)
  end
end

-- The index of the body's final '}' when its first non-whitespace byte is '{' and its last is
-- '}', else nil: the one shape of a JSON text whose value is an object.
local function object_close(s)
  if s:byte(skip_ws(s, 1)) ~= OPEN_BRACE then return nil end
  local close = #s
  while WHITESPACE[s:byte(close)] do close = close - 1 end
  if s:byte(close) ~= CLOSE_BRACE then return nil end
  return close
end

-- The first occurrence of the member name `quoted` (`"name"`, see "Reading the body") at or
-- after `from`: the index of its opening quote and of the ':' after it; nil when there is none.
local function next_member(s, quoted, from)
  while true do
    local k = s:find(quoted, from, true)
    if k == nil then return nil end
    local colon = skip_ws(s, k + #quoted)
    if s:byte(colon) == COLON and not escaped(s, k) then return k, colon end
    from = k + 1
  end
end

-- The raw text (escapes not decoded) of the JSON string starting at i; nil when the value at i is
-- not a string; false when the string is longer than `max_bytes` (or not terminated).
local function string_at(s, i, max_bytes)
  if s:byte(i) ~= QUOTE then return nil end
  local k = i
  repeat
    k = s:find('"', k + 1, true)
    if k == nil or k - i - 1 > max_bytes then return false end
  until not escaped(s, k)
  return s:sub(i + 1, k - 1)
end

-- The fast path for the name `quoted`: the raw value of its first occurrence (nil when there is
-- none or its value is not a string, false when it is longer than max_bytes), when the name occurs
-- only once or, if `first_member_counts`, that occurrence is the body's first member (right after
-- its opening '{', so a top-level member); else nil, true: the slow path must decide.
local function member_value(s, quoted, max_bytes, first_member_counts)
  local first, colon = next_member(s, quoted, 1)
  if first == nil then return nil end
  local is_first_member = first_member_counts and first == skip_ws(s, skip_ws(s, 1) + 1)
  if not is_first_member and next_member(s, quoted, first + 1) ~= nil then return nil, true end
  return string_at(s, skip_ws(s, colon + 1), max_bytes)
end

-- The slow path: the raw value of the last top-level member named `name` (nil when there is none
-- or it is not a string, false when longer than max_bytes).
local function last_member(s, list, name, max_bytes)
  local raw = nil
  for _, m in ipairs(list) do
    if m.key == name then
      raw = nil
      if s:byte(m.value_first) == QUOTE then
        raw = m.value_last - m.value_first - 1 <= max_bytes and s:sub(m.value_first + 1, m.value_last - 1)
      end
    end
  end
  return raw
end

-- Whether a text can be a header value: not empty, at most max_bytes long, no control characters.
local function usable_header_value(text, max_bytes)
  return text ~= "" and #text <= max_bytes and not has_control_character(text)
end

-- What the filter reads from a body (see "Reading the body"): its top-level "model" (nil when it
-- names none), its top-level "user" when `want_user` and that is a usable header value, and the
-- index of its final '}'. On a body it refuses: nil and the reason.
local function read_body(s, want_user)
  local close = object_close(s)
  if close == nil then return nil, "the body is not a JSON object" end
  local max_model = CONFIG.max_model_name_bytes
  local max_user = CONFIG.max_user_bytes * MAX_ESCAPED_BYTES_PER_BYTE
  -- The model may be taken from the first member without looking further: the filter appends
  -- it as the last member, which is the one the servers read.
  local model, model_again = member_value(s, '"model"', max_model, true)
  local user, user_again = nil, nil
  if want_user then user, user_again = member_value(s, '"user"', max_user, false) end
  if model_again or user_again then
    local list, reason = members(s)
    if list == nil then return nil, reason end
    if model_again then model = last_member(s, list, "model", max_model) end
    if user_again then user = last_member(s, list, "user", max_user) end
  end
  if model == false then
    return nil, string.format("the model name is no terminated string of at most %d bytes", CONFIG.max_model_name_bytes)
  end
  local fields = { close = close }
  if model ~= nil then
    fields.model = decode_string(model)
    -- It becomes a header value: an escaped CR or LF must not split it.
    if has_control_character(fields.model) then return nil, "the model name holds control characters" end
  end
  if user then
    user = decode_string(user)
    if usable_header_value(user, CONFIG.max_user_bytes) then fields.user = user end
  end
  return fields
end

-- The body with `"model":<name>,"priority":<n>` as the last members of its top-level object,
-- inserted just before its final '}' (`close`). This cannot land inside a nested value or a string
-- of a body the servers accept as JSON: a JSON text is one value with only whitespace around it,
-- so in a body starting with '{' the final '}' closes the top-level object. Nor can it make a body
-- they refuse into one they accept with these members elsewhere: the quote before `model` follows
-- ',' (or, in an empty object, '{' or whitespace), so it is not escaped, and it cannot close a
-- string, or `model` would stand outside one; so it opens one, and what is appended reads as
-- written: if the result is JSON, "model" and "priority" name the last two members of the object
-- the final '}' closes, the top-level one. Parsers that keep the last of duplicate names, as both
-- servers do ("Reading the body"), then read this model and this priority whatever the client sent.
local function with_model_and_priority_last(s, close, model_json, priority)
  local before = close - 1
  while WHITESPACE[s:byte(before)] do before = before - 1 end
  local separator = s:byte(before) == OPEN_BRACE and "" or "," -- an empty object
  -- Built in the worker's one buffer, the body's bytes up to its final '}' copied straight from
  -- the string: no intermediate string of the body (its copy and its interning are most of what
  -- writing a 1 MB body back costs). The buffer is the Lua state's, one per Envoy worker, and
  -- nothing yields between reset and tostring; it keeps the largest body's room (a tier limit).
  BODY_BUFFER:reset()
  BODY_BUFFER:putcdata(ffi.cast("const char *", s), close - 1)
  BODY_BUFFER:put(separator, '"model":', model_json, ',"priority":', string.format("%d", priority), s:sub(close))
  return BODY_BUFFER:tostring()
end

-- The LoRA module (a JSON string) that serves a request for the model `served`: its own name, or
-- an adapter's module; for an adapter with a canary, the revision the model's override header
-- names (only principals allowed to send it get this far: the gateway's AuthorizationPolicy), else
-- by the user's sticky bucket: the top `canary_weight` buckets take the canary, while a base
-- model's canary takes the bottom ones (its routes' RE2 ranges), so the two canaries share as few
-- users as their weights allow; a request without a user is split at random by the weight.
local function adapter_module(served, headers, user)
  local split = served.adapter_canary
  if split == nil then return served.name_json end
  local forced = headers:get(split.override_header)
  if forced ~= nil and split.modules[forced] ~= nil then return split.modules[forced] end
  local b = user ~= nil and bucket(user) or math.random(0, 99)
  if b >= 100 - split.canary_weight then return split.canary_json end
  return split.stable_json
end

local function reply(handle, status, message)
  handle:respond({ [":status"] = tostring(status), ["content-type"] = "text/plain" }, message .. "\n")
end

-- The verified token's payload (a table of its claims), or nil when there is none.
local function token_claims(handle)
  local metadata = handle:streamInfo():dynamicMetadata():get(JWT_METADATA)
  if metadata == nil then return nil end
  return metadata[JWT_PAYLOAD]
end

-- The tier a verified token claims (nil when it claims none) and the user it names (nil when it
-- names none); false and the reason when its tier claim names no tier, or its user claim is no
-- usable header value.
local function identity(claims)
  if claims == nil then return nil, nil end
  local claimed = claims[CONFIG.tier_claim]
  if claimed ~= nil and (type(claimed) ~= "string" or CONFIG.priorities[claimed] == nil) then
    return false, "the token's " .. CONFIG.tier_claim .. " claim names no tier of this gateway"
  end
  local named = claims[CONFIG.user_claim]
  if type(named) ~= "string" or named == "" then return claimed, nil end
  if not usable_header_value(named, CONFIG.max_user_bytes) then
    return false, "the token's " .. CONFIG.user_claim .. " claim is no usable user id"
  end
  return claimed, named
end

-- Whether the token's tenant claim (a string, or a list of strings) names one of `tenants`.
-- The list is walked only up to max_members entries: the claim is the issuer's, but a token is
-- still input.
local function allowed_tenant(claims, tenants)
  local claimed = claims and claims[CONFIG.tenant_claim]
  if type(claimed) == "string" then return tenants[claimed] == true and claimed or nil end
  if type(claimed) ~= "table" then return nil end
  for i = 1, CONFIG.max_members do
    local tenant = claimed[i]
    if tenant == nil then return nil end
    if type(tenant) == "string" and tenants[tenant] == true then return tenant end
  end
  return nil
end

-- Why a body over `limit` is refused: the tier's limit, or (tier nil) the limit of a token
-- without a tier claim.
local function too_large(tier, limit)
  if tier then return string.format("the %s tier takes request bodies of at most %d bytes", tier, limit) end
  return string.format("a token without a %s claim may send request bodies of at most %d bytes", CONFIG.tier_claim, limit)
end

local function set_tier(handle, headers, tier)
  headers:replace(CONFIG.tier_header, tier)
  handle:streamInfo():dynamicMetadata():set(GATEWAY_METADATA, "tier", tier)
end

-- Whether a header name begins with one of the prefixes of the headers other components act on.
local function control_header(name)
  for _, prefix in ipairs(CONFIG.control_header_prefixes) do
    if name:sub(1, #prefix) == prefix then return true end
  end
  return false
end

-- Removes every client value of the headers this filter owns and of every header a component
-- behind it acts on. The names are collected first: Envoy forbids changing a header map while
-- iterating it (lua_filter.rst, headers:__pairs()).
local function strip_client_headers(headers)
  local doomed = {}
  for name, _ in pairs(headers) do
    if CONFIG.owned_headers[name] or control_header(name) then doomed[#doomed + 1] = name end
  end
  for _, name in ipairs(doomed) do headers:remove(name) end
end

function envoy_on_request(handle)
  -- Envoy's wrappers live until the script yields: a header map taken before handle:body()
  -- is dead after it ("object used outside of proper scope"), so it is taken again there.
  local headers = handle:headers()
  strip_client_headers(headers)

  local claims = token_claims(handle)
  local claimed, user = identity(claims)
  if claimed == false then return reply(handle, 403, user) end -- `user` holds the reason
  local verified_user = user
  local tier = claimed or CONFIG.default_tier
  set_tier(handle, headers, tier)

  local model = nil
  if headers:get(":method") == "POST" then
    -- Without a tier claim the tier is known only with the model: until then the larger limit
    -- it may become holds, and the tier's own once it is known.
    local limit = claimed and CONFIG.max_body_bytes[tier] or CONFIG.max_unclaimed_body_bytes
    -- Refused before the body is buffered.
    -- (Envoy's headers:get returns no value at all for a missing header, and LuaJIT's tonumber
    -- raises on no argument: a chunked body has no content-length.)
    local declared = headers:get("content-length")
    declared = declared and tonumber(declared)
    if declared ~= nil and declared > limit then return reply(handle, 413, too_large(claimed and tier, limit)) end
    local body = handle:body() -- yields until the whole body is buffered
    headers = handle:headers()
    local length = body and body:length() or 0
    if length > limit then return reply(handle, 413, too_large(claimed and tier, limit)) end
    if length == 0 then return reply(handle, 400, "an inference request needs a JSON object body") end
    local text = body:getBytes(0, length)
    local fields, reason = read_body(text, user == nil)
    if fields == nil then return reply(handle, 400, reason) end
    model, user = fields.model, user or fields.user
    local served = model and CONFIG.models[model]
    if not claimed and served then
      tier = served.unclaimed_tier
      set_tier(handle, headers, tier)
    end
    if length > CONFIG.max_body_bytes[tier] then return reply(handle, 413, too_large(tier, CONFIG.max_body_bytes[tier])) end
    if model ~= nil then headers:replace(CONFIG.model_header, model) end
    if served then
      local caller = nil
      if CONFIG.tenant_claim ~= nil then
        caller = allowed_tenant(claims, served.tenants)
        if caller == nil then
          return reply(handle, 403, "the token's " .. CONFIG.tenant_claim .. " claim names no tenant allowed to call this model")
        end
      end
      -- The endpoint picker's flow within the tier's band: the calling tenant (verified), else
      -- the token's user; never a body value. Its fairness policy takes flows in turn, so one
      -- tenant's burst cannot hold the band's dispatch for everyone.
      local flow = caller or verified_user
      if flow ~= nil then headers:replace(CONFIG.fairness_header, flow) end
      local priority = served.priority_tiers[tier] and CONFIG.priorities[tier] or FCFS_PRIORITY
      headers:replace(CONFIG.priority_header, string.format("%d", priority))
      body:setBytes(with_model_and_priority_last(text, fields.close, adapter_module(served, headers, user), priority))
    end
  end

  if user ~= nil then
    headers:replace(CONFIG.bucket_header, string.format("%d", bucket(user)))
    if model ~= nil and CONFIG.models[model] ~= nil then headers:replace(CONFIG.models[model].user_key_header, user) end
  end
end

function envoy_on_response(handle)
  local headers = handle:headers()
  -- The picker's refusals: 429 when a queue TTL, cap or eviction dropped the request, 503 when
  -- no server can take it (pkg/common/error/error.go); both carry the dropped-reason header.
  -- Every other 503 is a shed answer too (Envoy's circuit breaker, no healthy server, vLLM's
  -- admission control, Knative's activator): the client is told when to come back, unless the
  -- answer says so itself. (The overload manager's own 503 is answered before any filter runs,
  -- so it carries none.)
  local status = headers:get(":status")
  local picker_shed = (status == "429" or status == "503") and headers:get(CONFIG.shed_status_header) ~= nil
  if not picker_shed and (status ~= "503" or headers:get("retry-after") ~= nil) then return end
  local stored = handle:streamInfo():dynamicMetadata():get(GATEWAY_METADATA)
  local tier = stored and stored["tier"] or CONFIG.default_tier
  headers:replace(":status", "503")
  headers:replace("retry-after", string.format("%d", CONFIG.retry_after[tier] or CONFIG.retry_after[CONFIG.default_tier]))
end

-- Exposed for the platform's tests, which run this very source in LuaJIT.
GATEWAY_FILTER = { fnv1a32 = fnv1a32, bucket = bucket, members = members }
