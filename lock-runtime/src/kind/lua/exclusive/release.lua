-- Free a lock held by one acquisition.
-- KEYS[1]  the lock (see acquire.lua)
-- ARGV[1]  the acquisition's owner id
-- ARGV[2]  the releasing client's id, so it can skip its own news
-- ARGV[3]  the fencing token of the hold, so a waiter told by several
--          nodes (Redlock) wakes once
-- The freed lock keeps its fence and the rest of its lease as its expiry.
-- When freed, publishes `ARGV[2]:ARGV[3]` on the channel named KEYS[1] if a
-- caller found the lock held (uncontended releases publish nothing); a
-- publish refused (NOPERM: no rights on the channel) is ignored.
-- On a shared kind's hash: frees the owner's hold, or withdraws its place
-- in a line (a waiting writer's claim, a fair waiter's ticket: answered -1);
-- see ../shared/hash.lua.
-- Returns 1 when the lock was freed,
-- -1 when ARGV[1] did not hold it (it expired or was taken): nothing changed.
-- Errors with LOCKLAYOUT when the key holds anything else (another state,
-- a fence above 2^53 - 1: see acquire.lua).
-- Reads the stored lock with read_lock (read.lua, prepended).
local key = KEYS[1]
local fence, state, holder, bad, hash = read_lock(key)
if hash then
  return hash_lib().hash_release(key, redis.call('hgetall', key), ARGV[1], ARGV[2], ARGV[3])
end
if bad then
  return bad
end
if not fence or state == 'f' or holder ~= ARGV[1] then
  return -1
end
redis.call('set', key, 'L1:' .. fence .. ':f:', 'keepttl')
if state == 'w' then
  -- pcall: the lock is freed now, whatever the publish does; a user without
  -- rights on the channel (NOPERM) must not make the release look failed.
  redis.pcall('publish', key, ARGV[2] .. ':' .. ARGV[3])
end
return 1
