-- Inference gateway request filter (Envoy HTTP Lua filter, LuaJIT), on the Istio ingress gateway.
--
-- The platform prepends `local CONFIG = {...}` generated from the stack config:
--   tier_header, default_tier, bucket_header, model_header, default_user_header,
--   priorities = {premium = 0, ...}           vLLM priority per tier (lower is served first)
--   models = {["served-name"] = {user_key_header = "x-user-id", priority_tiers = {premium = true}}}
--
-- For every request it
--   1. normalises the tier header (missing or unknown: the default tier), so routes match exactly;
--   2. reads the OpenAI "model" from a JSON body and sets the model header routes match on
--      (a client-sent value is always replaced or removed);
--   3. computes a stable bucket 0..99 from the model's user-key header with FNV-1a (32 bit), never
--      a per-process seeded hash, so a user always lands on the same side of a canary;
--   4. where the destination server schedules by priority, writes the tier's priority into the
--      body as the last "priority" member (any client-sent "priority" is removed first); where
--      it does not, removes any client-sent "priority". vLLM 0.18.0 ignores a priority under
--      fcfs (vllm/v1/core/sched/request_queue.py), though its API documents that any priority
--      but 0 "will raise an error" there; a client's priority is never the platform's tier.

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

local function scan_value(s, i)
  local c = s:sub(i, i)
  if c == '"' then return scan_string(s, i) end
  if c == "{" or c == "[" then
    local depth, j = 0, i
    while true do
      local k = s:find('[{}%[%]"]', j)
      if k == nil then return nil end
      local ch = s:sub(k, k)
      if ch == '"' then
        j = scan_string(s, k)
        if j == nil then return nil end
      else
        depth = depth + ((ch == "{" or ch == "[") and 1 or -1)
        j = k + 1
        if depth == 0 then return j end
      end
    end
  end
  local _, e = s:find("^[%w%.%+%-]+", i)
  if e == nil then return nil end
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
-- index of the closing brace; nil when the text is not a JSON object.
local function members(s)
  local i = skip_ws(s, 1)
  if s:sub(i, i) ~= "{" then return nil end
  local list = {}
  i = skip_ws(s, i + 1)
  if s:sub(i, i) == "}" then return list, i end
  while true do
    if s:sub(i, i) ~= '"' then return nil end
    local key_end = scan_string(s, i)
    if key_end == nil then return nil end
    local key = decode_string(s:sub(i + 1, key_end - 2))
    local first = i
    i = skip_ws(s, key_end)
    if s:sub(i, i) ~= ":" then return nil end
    i = skip_ws(s, i + 1)
    local value_first = i
    local value_end = scan_value(s, i)
    if value_end == nil then return nil end
    list[#list + 1] = { key = key, first = first, value_first = value_first, value_last = value_end - 1 }
    i = skip_ws(s, value_end)
    local c = s:sub(i, i)
    if c == "}" then return list, i end
    if c ~= "," then return nil end
    i = skip_ws(s, i + 1)
  end
end

local function model_of(body)
  local list = members(body)
  if list == nil then return nil end
  local found = nil
  for _, m in ipairs(list) do
    -- JSON parsers keep the last of duplicate keys; so do we.
    if m.key == "model" and body:sub(m.value_first, m.value_first) == '"' then
      found = decode_string(body:sub(m.value_first + 1, m.value_last - 1))
    end
  end
  return found
end

-- The body with every top-level "priority" removed and, unless `priority` is nil,
-- `"priority":<n>` appended last. nil when the body is not a JSON object, or when there is
-- nothing to remove and nothing to add.
local function with_priority(body, priority)
  local list, close = members(body)
  if list == nil then return nil end
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

function envoy_on_request(handle)
  local headers = handle:headers()
  headers:remove(CONFIG.bucket_header)
  headers:remove(CONFIG.model_header)

  local tier = headers:get(CONFIG.tier_header)
  if tier == nil or CONFIG.priorities[tier] == nil then tier = CONFIG.default_tier end
  headers:replace(CONFIG.tier_header, tier)

  local model = nil
  if headers:get(":method") == "POST" then
    local body = handle:body()
    if body ~= nil and body:length() > 0 then
      local text = body:getBytes(0, body:length())
      model = model_of(text)
      if model ~= nil then
        headers:replace(CONFIG.model_header, model)
        local served = CONFIG.models[model]
        if served ~= nil then
          local priority = nil
          if served.priority_tiers[tier] then priority = CONFIG.priorities[tier] end
          local rewritten = with_priority(text, priority)
          if rewritten ~= nil then body:setBytes(rewritten) end
        end
      end
    end
  end

  local user_header = CONFIG.default_user_header
  if model ~= nil and CONFIG.models[model] ~= nil then user_header = CONFIG.models[model].user_key_header end
  local user = headers:get(user_header)
  if user ~= nil and user ~= "" then
    headers:replace(CONFIG.bucket_header, string.format("%d", bucket(user)))
  end
end

-- Exposed for the platform's tests, which run this very source in LuaJIT.
GATEWAY_FILTER = { fnv1a32 = fnv1a32, bucket = bucket, model_of = model_of, with_priority = with_priority, members = members }
