-- Free a lock whoever holds it (an operator's force-unlock).
-- KEYS[1]  the lock (see acquire.lua)
-- ARGV[1]  the id of the client that forces it, for the release notice
-- The freed lock keeps its fence and the rest of its lease as its expiry,
-- as after a release, so fencing tokens never go back.
-- When it was held, publishes `ARGV[1]:<fence>` on the channel named KEYS[1],
-- whether or not a caller found it held (a waiter may have marked it `w` on
-- another node, or be about to): waiters in every process wake at once.
-- Returns the fencing token of the hold it freed (> 0), or 0 when the lock
-- was free or absent: nothing changed.
-- Errors with LOCKLAYOUT when the key holds anything else (another state,
-- a fence above 2^53 - 1: see acquire.lua).
local key = KEYS[1]
local value = redis.pcall('get', key)
if not value then
  return 0
end
local fence, state
if type(value) == 'string' then
  fence, state = string.match(value, '^L1:(%d+):([hwf]):')
end
if not fence then
  return redis.error_reply('LOCKLAYOUT ' .. key .. ' holds no lock of layout 1 (an older lock-runtime, another library, or not a lock)')
end
if tonumber(fence) > 9007199254740991 then
  return redis.error_reply('LOCKLAYOUT ' .. key .. ' holds the fence ' .. fence .. ', above 2^53 - 1: Lua numbers do not carry it exactly')
end
if state == 'f' then
  return 0
end
redis.call('set', key, 'L1:' .. fence .. ':f:', 'keepttl')
-- pcall: the lock is freed now, whatever the publish does (NOPERM: no
-- rights on the channel).
redis.pcall('publish', key, ARGV[1] .. ':' .. fence)
return tonumber(fence)
