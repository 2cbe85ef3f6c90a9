-- Give back one hold of a lock.
-- KEYS[1]  the lock: a hash of owner id -> hold count
-- ARGV[1]  the owner id
-- ARGV[2]  the message published on the channel named KEYS[1] when the lock
--          is freed (the releasing client's id, so it can skip its own news)
-- Returns 1 when the lock was freed (key deleted, release published),
-- 0 when the owner still holds it (its count is still above zero),
-- -1 when the owner did not hold it (it expired or was taken): nothing changed.
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return -1
end
if redis.call('hincrby', KEYS[1], ARGV[1], -1) > 0 then
  return 0
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[1], ARGV[2])
return 1
