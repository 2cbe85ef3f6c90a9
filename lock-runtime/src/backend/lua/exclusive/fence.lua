-- Raise a held lock's kept fencing token (Redlock: the holder writes the
-- token it took, the largest of the granting nodes', back to them, so that
-- any later quorum answers a larger one).
-- KEYS[1]  the lock (see acquire.lua)
-- ARGV[1]  the owner id of the acquisition that holds it
-- ARGV[2]  the token
-- Returns 1 when ARGV[1] holds the lock (its fence is now at least ARGV[2]),
-- 0 otherwise: nothing changed.
local key = KEYS[1]
local value = redis.pcall('get', key)
if type(value) ~= 'string' then
  return 0
end
local fence, state, holder = string.match(value, '^L1:(%d+):([hw]):(.*)$')
if holder ~= ARGV[1] then
  return 0
end
if tonumber(fence) < tonumber(ARGV[2]) then
  redis.call('set', key, 'L1:' .. ARGV[2] .. ':' .. state .. ':' .. holder, 'keepttl')
end
return 1
