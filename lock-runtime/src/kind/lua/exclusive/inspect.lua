-- Read a lock as it is (an operator's inspect); changes nothing.
-- KEYS[1]  the lock (see acquire.lua)
-- Returns an empty array when the key is absent, else the strings
-- {fence, state, owner, pttl}: the value's parts and the key's remaining
-- time to live in milliseconds (-1 when it has no expiry).
-- Errors with LOCKLAYOUT when the key holds anything else (another state,
-- a fence above 2^53 - 1: see acquire.lua).
-- Reads the stored lock with read_lock (read.lua, prepended).
local key = KEYS[1]
local fence, state, owner, bad, hash = read_lock(key)
if hash then
  return hash_lib().hash_inspect(key)
end
if bad then
  return bad
end
if not fence then
  return {}
end
return {fence, state, owner, tostring(redis.call('pttl', key))}
