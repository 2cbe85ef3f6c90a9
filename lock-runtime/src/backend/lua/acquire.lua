-- Take or re-enter a lock, and give a new holder its fencing token.
-- KEYS[1]  the lock: a hash of owner id -> hold count, plus the field
--          `fence` = the last fencing token given for this key
-- ARGV[1]  the owner id
-- ARGV[2]  the lease in milliseconds
-- Returns {1, token} when ARGV[1] now holds the lock, with the lease reset:
-- a new holder gets a new token, a re-entry the token it already has.
-- Returns {0, ttl} when another owner holds it: the holder's remaining
-- lease in milliseconds (-1 when the key has no expiry).
--
-- A new token is the last token + 1 while the key keeps it, else the server
-- time in microseconds. Tokens cannot run ahead of that clock (a key is not
-- taken more than once a microsecond), so they keep increasing after the
-- key expires or Redis restarts empty, as long as the clock does not step
-- back.
local key, owner = KEYS[1], ARGV[1]
local fence = redis.call('hget', key, 'fence')
local holders = redis.call('hlen', key)
if fence then
  holders = holders - 1
end
if holders > 0 then
  if redis.call('hexists', key, owner) == 0 then
    return {0, redis.call('pttl', key)}
  end
  redis.call('hincrby', key, owner, 1)
  redis.call('pexpire', key, ARGV[2])
  return {1, tonumber(fence)}
end
local token
if fence then
  token = tonumber(fence) + 1
else
  local now = redis.call('time')
  token = tonumber(now[1]) * 1000000 + tonumber(now[2])
end
redis.call('hset', key, owner, 1, 'fence', string.format('%d', token))
redis.call('pexpire', key, ARGV[2])
return {1, token}
