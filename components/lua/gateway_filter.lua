-- Inference gateway request filter (Envoy HTTP Lua filter, LuaJIT), on the Istio ingress gateway.
--
-- The platform prepends `local CONFIG = {...}` generated from the stack config:
--   tier_header, default_tier, bucket_header, model_header,
--   tier_claim, user_claim                    claims of the verified token naming the tier and user
--   tenant_claim                              claim naming the caller's tenant(s); nil: no tenant scoping
--   user_headers = {["x-user-id"] = true}     every header a model's servers receive the user in
--   priorities = {premium = 0, ...}           vLLM priority per tier (lower is served first)
--   max_body_bytes = {premium = 4194304, ...} largest request body per tier
--   max_members, max_member_name_bytes, max_model_name_bytes, max_depth   caps on the JSON body scan
--   models = {["served-name"] = {user_key_header = "x-user-id", priority_tiers = {premium = true},
--             tenants = {["team-a"] = true}}}
--
-- It runs after Envoy's jwt_authn and RBAC filters (Istio puts them first; this filter sits just
-- before the router), so every request here carries a verified token. For every request it
--   1. removes every client value of the headers it owns (tier, bucket, model, user keys): nothing
--      a client sends selects a tier, a version split bucket or a user;
--   2. takes the tier and the user from the verified token's payload, which jwt_authn stores as
--      dynamic metadata (Istio: payload_in_metadata "payload"); a missing tier claim is the default
--      tier, a tier claim naming no tier is refused (403: a token must not silently change class);
--   3. for a POST: refuses a body over the tier's limit (413, by content-length before reading it),
--      and a body that is not one JSON object with at most max_members top-level members (400);
--      the scan is linear in the body and stops at the cap, keeping no per-member state beyond it;
--   4. reads the OpenAI "model" from the body and sets the model header routes match on; a model
--      of the platform whose tenants the token's tenant claim does not name is refused (403);
--   5. computes a stable bucket 0..99 from the user with FNV-1a (32 bit), never a per-process
--      seeded hash, so a user always lands on the same side of a canary, and passes the user to the
--      model's servers in its user-key header;
--   6. where the destination server schedules by priority, writes the tier's priority into the
--      body as the last "priority" member (any client-sent "priority" is removed first); where
--      it does not, removes any client-sent "priority". vLLM 0.18.0 ignores a priority under
--      fcfs (vllm/v1/core/sched/request_queue.py), though its API documents that any priority
--      but 0 "will raise an error" there; a client's priority is never the platform's tier.

-- Where jwt_authn puts the verified payload: its filter name, and the key Istio configures
-- (istio/istio 1.30.3 pilot/pkg/xds/filters/filters.go: EnvoyJwtFilterPayload = "payload"), read
-- with streamInfo():dynamicMetadata():get() (envoyproxy/envoy docs/root/configuration/http/
-- http_filters/lua_filter.rst).
local JWT_METADATA = "envoy.filters.http.jwt_authn"
local JWT_PAYLOAD = "payload"

local bit = require("bit")

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

-- A minimal JSON scanner: just enough to find the top-level members of an object without
-- decoding the (possibly large) values.
local function skip_ws(s, i)
  local _, e = s:find("^[ \t\r\n]*", i)
  return e + 1
end

local function scan_string(s, i)
  -- s:sub(i, i) is the opening quote; returns the index after the closing quote.
  local j = i + 1
  while true do
    local k = s:find('["\\]', j)
    if k == nil then return nil end
    if s:sub(k, k) == '"' then return k + 1 end
    j = k + 2
  end
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
  return string.char(0xE0 + math.floor(code / 4096), 0x80 + math.floor(code / 64) % 64, 0x80 + code % 64)
end

-- The text of a JSON string literal (without its quotes), escapes decoded.
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
      out[#out + 1] = utf8(code)
      i = i + 6
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

-- The "model" of a body's members (a string), or nil; on a model name over the cap or with
-- control characters: nil and the reason.
local function model_of(body, list)
  local found = nil
  for _, m in ipairs(list) do
    -- JSON parsers keep the last of duplicate keys; so do we.
    if m.key == "model" then
      found = nil
      if body:sub(m.value_first, m.value_first) == '"' then
        if m.value_last - m.value_first - 1 > CONFIG.max_model_name_bytes then
          return nil, string.format("the model name is longer than %d bytes", CONFIG.max_model_name_bytes)
        end
        found = decode_string(body:sub(m.value_first + 1, m.value_last - 1))
        -- It becomes a header value: an escaped CR or LF must not split it.
        if found:find("%c") then return nil, "the model name holds control characters" end
      end
    end
  end
  return found
end

-- The body with every top-level "priority" removed and, unless `priority` is nil,
-- `"priority":<n>` appended last; nil when there is nothing to remove and nothing to add.
local function with_priority(body, list, close, priority)
  local parts = {}
  for _, m in ipairs(list) do
    if m.key ~= "priority" then parts[#parts + 1] = body:sub(m.first, m.value_last) end
  end
  if priority == nil then
    if #parts == #list then return nil end
  else
    parts[#parts + 1] = '"priority":' .. string.format("%d", priority)
  end
  return "{" .. table.concat(parts, ",") .. "}" .. body:sub(close + 1)
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

-- The tier and user a verified token names; nil and the reason when its tier claim names no
-- tier, or its user claim is no usable header value (control characters, over 256 bytes).
local function identity(claims)
  local tier, user = CONFIG.default_tier, nil
  if claims == nil then return tier, user end
  local claimed = claims[CONFIG.tier_claim]
  if claimed ~= nil then
    if type(claimed) ~= "string" or CONFIG.priorities[claimed] == nil then
      return nil, "the token's " .. CONFIG.tier_claim .. " claim names no tier of this gateway"
    end
    tier = claimed
  end
  local named = claims[CONFIG.user_claim]
  if type(named) == "string" and named ~= "" then
    if #named > 256 or named:find("%c") then
      return nil, "the token's " .. CONFIG.user_claim .. " claim is no usable user id"
    end
    user = named
  end
  return tier, user
end

-- Whether the token's tenant claim (a string, or a list of strings) names one of `tenants`.
-- The list is walked only up to max_members entries: the claim is the issuer's, but a token is
-- still input.
local function tenant_allowed(claims, tenants)
  local claimed = claims and claims[CONFIG.tenant_claim]
  if type(claimed) == "string" then return tenants[claimed] == true end
  if type(claimed) ~= "table" then return false end
  for i = 1, CONFIG.max_members do
    local tenant = claimed[i]
    if tenant == nil then return false end
    if type(tenant) == "string" and tenants[tenant] == true then return true end
  end
  return false
end

function envoy_on_request(handle)
  local headers = handle:headers()
  headers:remove(CONFIG.tier_header)
  headers:remove(CONFIG.bucket_header)
  headers:remove(CONFIG.model_header)
  for header in pairs(CONFIG.user_headers) do headers:remove(header) end

  local claims = token_claims(handle)
  local tier, user = identity(claims)
  if tier == nil then return reply(handle, 403, user) end  -- `user` holds the reason
  headers:replace(CONFIG.tier_header, tier)

  local model = nil
  if headers:get(":method") == "POST" then
    local limit = CONFIG.max_body_bytes[tier]
    local declared = tonumber(headers:get("content-length"))
    local too_large = string.format("the %s tier takes request bodies of at most %d bytes", tier, limit)
    -- Refused before the body is buffered.
    if declared ~= nil and declared > limit then return reply(handle, 413, too_large) end
    local body = handle:body()
    local length = body and body:length() or 0
    if length > limit then return reply(handle, 413, too_large) end
    if length == 0 then return reply(handle, 400, "an inference request needs a JSON object body") end
    local text = body:getBytes(0, length)
    local list, close_or_reason = members(text)
    if list == nil then return reply(handle, 400, close_or_reason) end
    local reason
    model, reason = model_of(text, list)
    if reason ~= nil then return reply(handle, 400, reason) end
    if model ~= nil then
      headers:replace(CONFIG.model_header, model)
      local served = CONFIG.models[model]
      if served ~= nil and CONFIG.tenant_claim ~= nil and not tenant_allowed(claims, served.tenants) then
        return reply(handle, 403, "the token's " .. CONFIG.tenant_claim .. " claim names no tenant allowed to call this model")
      end
      if served ~= nil then
        local priority = nil
        if served.priority_tiers[tier] then priority = CONFIG.priorities[tier] end
        local rewritten = with_priority(text, list, close_or_reason, priority)
        if rewritten ~= nil then body:setBytes(rewritten) end
      end
    end
  end

  if user ~= nil then
    headers:replace(CONFIG.bucket_header, string.format("%d", bucket(user)))
    if model ~= nil and CONFIG.models[model] ~= nil then headers:replace(CONFIG.models[model].user_key_header, user) end
  end
end

-- Exposed for the platform's tests, which run this very source in LuaJIT.
GATEWAY_FILTER = { fnv1a32 = fnv1a32, bucket = bucket, model_of = model_of, with_priority = with_priority, members = members }
