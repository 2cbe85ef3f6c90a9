-- Free a lock whoever holds it (an operator's force-unlock).
-- KEYS[1]  the lock (see acquire.lua)
-- ARGV[1]  the id of the client that forces it, for the release notice
-- The freed lock keeps its fence and the rest of its lease as its expiry,
-- as after a release, so fencing tokens never go back, and names the
-- holder it freed behind a `!` (see freed_key, read.lua): the holder's own
-- release or renewal then learns that an operator freed it.
-- When it was held, publishes `ARGV[1]:<fence>` on the channel named KEYS[1],
-- whether or not a caller found it held (a waiter may have marked it `w` on
-- another node, or be about to): waiters in every process wake at once.
-- Returns the fencing token of the hold it freed (> 0), or 0 when the lock
-- was free or absent: nothing changed.
-- Errors with LOCKLAYOUT when the key holds anything else (another state,
-- a fence above 2^53 - 1: see acquire.lua).
-- Reads the stored lock with read_lock (read.lua, prepended).
local key = KEYS[1]
local fence, state, holder, bad, hash = read_lock(key)
if hash then
  return hash_lib().hash_force(key, ARGV[1])
end
if bad then
  return bad
end
if not fence or state == 'f' then
  return 0
end
redis.call('set', key, 'L1:' .. fence .. ':f:!' .. holder, 'keepttl')
-- pcall: the lock is freed now, whatever the publish does (NOPERM: no
-- rights on the channel).
redis.pcall('publish', key, ARGV[1] .. ':' .. fence)
return tonumber(fence)
