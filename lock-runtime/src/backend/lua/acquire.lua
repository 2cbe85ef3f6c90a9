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
-- A new token is the server time in microseconds, or the last token + 1 if
-- that is not greater: strictly increasing per key while the `fence` field
-- lives, and across restarts and expiries as long as the server clock does
-- not step back.
local key, owner = KEYS[1], ARGV[1]
if redis.call('hexists', key, owner) == 1 then
  redis.call('hincrby', key, owner, 1)
  redis.call('pexpire', key, ARGV[2])
  return {1, tonumber(redis.call('hget', key, 'fence'))}
end
local last = redis.call('hget', key, 'fence')
local holders = redis.call('hlen', key)
if last then
  holders = holders - 1
end
if holders > 0 then
  return {0, redis.call('pttl', key)}
end
local now = redis.call('time')
local token = tonumber(now[1]) * 1000000 + tonumber(now[2])
if last and tonumber(last) >= token then
  token = tonumber(last) + 1
end
redis.call('hset', key, owner, 1, 'fence', string.format('%d', token))
redis.call('pexpire', key, ARGV[2])
return {1, token}
