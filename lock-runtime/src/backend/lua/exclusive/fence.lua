-- Raise a held lock's kept fencing token (Redlock: the holder writes the
-- token it took, the largest of the granting nodes', back to them, so that
-- any later quorum answers a larger one).
-- KEYS[1]  the lock (see acquire.lua)
-- ARGV[1]  the owner id of the acquisition that holds it
-- ARGV[2]  the token: a decimal of at most 2^53 - 1, as acquire.lua gives
-- Returns 1 when ARGV[1] holds the lock (its fence is now at least ARGV[2]),
-- 0 otherwise (absent, free, or another owner's): nothing changed.
-- Errors with LOCKLAYOUT when the key holds anything else, and with ERR for
-- a token out of that bound: compared as Lua numbers, it would not be exact.
local key, owner, raised = KEYS[1], ARGV[1], ARGV[2]
if not string.match(raised, '^%d+$') or tonumber(raised) > 9007199254740991 then
  return redis.error_reply('ERR fence.lua: the token ' .. raised .. ' is not a decimal of at most 2^53 - 1')
end
local value = redis.pcall('get', key)
if not value then
  return 0
end
local fence, state, holder
if type(value) == 'string' then
  fence, state, holder = string.match(value, '^L1:(%d+):([hwf]):(.*)$')
end
if not fence then
  return redis.error_reply('LOCKLAYOUT ' .. key .. ' holds no lock of layout 1 (an older lock-runtime, another library, or not a lock)')
end
if tonumber(fence) > 9007199254740991 then
  return redis.error_reply('LOCKLAYOUT ' .. key .. ' holds the fence ' .. fence .. ', above 2^53 - 1: Lua numbers do not carry it exactly')
end
if state == 'f' or holder ~= owner then
  return 0
end
if tonumber(fence) < tonumber(raised) then
  redis.call('set', key, 'L1:' .. string.format('%d', tonumber(raised)) .. ':' .. state .. ':' .. holder, 'keepttl')
end
return 1
