-- Give back one hold of a lock.
-- KEYS[1]  the lock: a hash of owner id -> hold count, plus `fence`
-- ARGV[1]  the owner id
-- ARGV[2]  the releasing client's id, so it can skip its own news
-- ARGV[3]  how long (ms) the freed key keeps its `fence` field, so that the
--          next token is greater even if the next holder comes within the
--          same microsecond or the clock steps back a little
-- ARGV[4]  the fencing token of the hold, so a waiter told by several
--          nodes (Redlock) wakes once
-- Publishes `ARGV[2]:ARGV[4]` on the channel named KEYS[1] when freed.
-- Returns 1 when the lock was freed (release published),
-- 0 when the owner still holds it (its count is still above zero),
-- -1 when the owner did not hold it (it expired or was taken): nothing changed.
local count = redis.call('hget', KEYS[1], ARGV[1])
if not count then
  return -1
end
if tonumber(count) > 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], -1)
  return 0
end
redis.call('hdel', KEYS[1], ARGV[1])
redis.call('pexpire', KEYS[1], ARGV[3])
redis.call('publish', KEYS[1], ARGV[2] .. ':' .. ARGV[4])
return 1
