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
-- Reads the stored lock with read_lock (read.lua, prepended).
local key, owner, raised = KEYS[1], ARGV[1], ARGV[2]
if not string.match(raised, '^%d+$') or tonumber(raised) > MAX_FENCE then
  return redis.error_reply('ERR fence.lua: the token ' .. raised .. ' is not a decimal of at most 2^53 - 1')
end
local fence, state, holder, bad, hash = read_lock(key)
if hash then
  return hash_lib().hash_fence(key, owner, raised)
end
if bad then
  return bad
end
if not fence or state == 'f' or holder ~= owner then
  return 0
end
if tonumber(fence) < tonumber(raised) then
  redis.call('set', key, 'L1:' .. string.format('%d', tonumber(raised)) .. ':' .. state .. ':' .. holder, 'keepttl')
end
return 1
