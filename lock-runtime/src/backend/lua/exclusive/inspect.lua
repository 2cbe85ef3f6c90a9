-- Read a lock as it is (an operator's inspect); changes nothing.
-- KEYS[1]  the lock (see acquire.lua)
-- Returns an empty array when the key is absent, else the strings
-- {fence, state, owner, pttl}: the value's parts and the key's remaining
-- time to live in milliseconds (-1 when it has no expiry).
-- Errors with LOCKLAYOUT when the key holds anything else (another state,
-- a fence above 2^53 - 1: see acquire.lua).
local key = KEYS[1]
local value = redis.pcall('get', key)
if not value then
  return {}
end
local fence, state, owner
if type(value) == 'string' then
  fence, state, owner = string.match(value, '^L1:(%d+):([hwf]):(.*)$')
end
if not fence then
  return redis.error_reply('LOCKLAYOUT ' .. key .. ' holds no lock of layout 1 (an older lock-runtime, another library, or not a lock)')
end
if tonumber(fence) > 9007199254740991 then
  return redis.error_reply('LOCKLAYOUT ' .. key .. ' holds the fence ' .. fence .. ', above 2^53 - 1: Lua numbers do not carry it exactly')
end
return {fence, state, owner, tostring(redis.call('pttl', key))}
