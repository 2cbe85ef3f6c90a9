-- Reset the lease of many held locks in one call.
-- KEYS[i]      a lock: a hash whose `owner` field is the holder (see acquire.lua)
-- ARGV[2i-1]   the owner id that holds KEYS[i]
-- ARGV[2i]     the lease of KEYS[i] in milliseconds
-- Returns an array: 1 where the owner still held the lock and its lease was
-- reset, 0 where the lock is gone or held by another owner.
local renewed = {}
for i, key in ipairs(KEYS) do
  if redis.call('hget', key, 'owner') == ARGV[2 * i - 1] then
    redis.call('pexpire', key, ARGV[2 * i])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
