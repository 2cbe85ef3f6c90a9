-- Take or re-enter a lock, and give a new holder its fencing token.
-- KEYS[1]  the lock, a hash:
--            owner   the holder's owner id (absent when free)
--            holds   the holder's hold count
--            fence   the last fencing token given for this key
--            waited  present when a caller found the lock held since it was
--                    taken: its release then publishes
-- ARGV[1]  the owner id
-- ARGV[2]  the lease in milliseconds
-- Returns one integer (a table would cost the server more):
-- the fencing token (> 0) when ARGV[1] now holds the lock, with the lease
-- reset: a new holder gets a new token, a re-entry the token it already has;
-- -2 - ttl when another owner holds it, where ttl is the holder's remaining
-- lease in milliseconds (so -1 when the key has no expiry).
--
-- A new token is the last token + 1 while the key keeps it, else the server
-- time in microseconds. Tokens cannot run ahead of that clock (a key is not
-- taken more than once a microsecond), so they keep increasing after the
-- key expires or Redis restarts empty, as long as the clock does not step
-- back.
local key, owner = KEYS[1], ARGV[1]
local lock = redis.call('hmget', key, 'owner', 'fence')
local holder, fence = lock[1], lock[2]
if holder then
  if holder ~= owner then
    redis.call('hset', key, 'waited', '1')
    return -2 - redis.call('pttl', key)
  end
  redis.call('hincrby', key, 'holds', 1)
  redis.call('pexpire', key, ARGV[2])
  return tonumber(fence)
end
local token
if fence then
  token = tonumber(fence) + 1
else
  local now = redis.call('time')
  token = tonumber(now[1]) * 1000000 + tonumber(now[2])
end
redis.call('hset', key, 'owner', owner, 'holds', '1', 'fence', string.format('%d', token))
redis.call('pexpire', key, ARGV[2])
return token
