-- Give back one hold of a lock.
-- KEYS[1]  the lock: a hash of `owner`, `holds`, `fence` and `waited`
--          (see acquire.lua)
-- ARGV[1]  the owner id
-- ARGV[2]  the releasing client's id, so it can skip its own news
-- ARGV[3]  the fencing token of the hold, so a waiter told by several
--          nodes (Redlock) wakes once
-- The freed key keeps `fence` and the rest of the lease as its expiry, so
-- the next holder within that time gets the last token + 1.
-- When freed, publishes `ARGV[2]:ARGV[3]` on the channel named KEYS[1] if a
-- caller found the lock held (uncontended releases publish nothing).
-- Returns 1 when the lock was freed,
-- 0 when the owner still holds it (its count is still above zero),
-- -1 when the owner did not hold it (it expired or was taken): nothing changed.
local lock = redis.call('hmget', KEYS[1], 'owner', 'holds', 'waited')
if lock[1] ~= ARGV[1] then
  return -1
end
if lock[2] ~= '1' then
  redis.call('hincrby', KEYS[1], 'holds', -1)
  return 0
end
redis.call('hdel', KEYS[1], 'owner', 'holds', 'waited')
if lock[3] then
  redis.call('publish', KEYS[1], ARGV[2] .. ':' .. ARGV[3])
end
return 1
