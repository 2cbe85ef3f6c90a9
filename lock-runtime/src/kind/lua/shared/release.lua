-- Free a shared kind's hold (a reader, a permit holder, a fair holder), or
-- withdraw a waiter's place (a fair waiter's ticket); see hash.lua.
-- KEYS[1]  the lock
-- ARGV[1]  the acquisition's owner id
-- ARGV[2]  the releasing client's id, for the notice
-- ARGV[3]  the fencing token of the hold, for the notice
-- Publishes `ARGV[2]:ARGV[3]` when a place opens for callers that were
-- refused (the last reader leaving while a writer waits; a permit; for a
-- fair lock `>` and the next waiter's owner id instead).
-- Returns 1 when the hold was freed, -1 when ARGV[1] held nothing (it
-- expired, or the key is another kind's): nothing changed.
-- Errors with LOCKLAYOUT when the key holds a hash that is no lock.
local key = KEYS[1]
local flat = redis.pcall('hgetall', key)
if flat.err then
  return -1
end
return hash_release(key, flat, ARGV[1], ARGV[2], ARGV[3])
