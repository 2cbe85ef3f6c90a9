-- Free a lock held by one acquisition, or keep it until the end of its
-- hold (`hold_at_least`).
-- KEYS[1]  the lock (see acquire.lua)
-- ARGV[1]  the acquisition's owner id
-- ARGV[2]  the releasing client's id, so it can skip its own news
-- ARGV[3]  the fencing token of the hold, so a waiter told by several
--          nodes (Redlock) wakes once
-- ARGV[4]  optional: the end of the hold, in ms since the epoch by this
--          node's clock: the TIME its acquire answered plus
--          `hold_at_least`. An absolute time, so that the same release
--          sent again (to a new master after a failover, see
--          lock-runtime/src/route/replay.rs) sets the same end.
-- The freed lock keeps its fence and the rest of its lease as its expiry,
-- and names ARGV[1] as the owner that freed it, behind a `+` when a caller
-- found it held (see freed_key, read.lua).
-- With ARGV[4] still ahead (by TIME), the lock is not freed but kept: its
-- holder becomes `ARGV[1]/kept` (fence and state as they were) and it
-- expires at that end, with no process alive (a hold the end of its lease
-- would outlive is cut short to it; one it would end before is lengthened,
-- past the lease if need be). The marked holder is another owner to every
-- other script, of this version and of layout-1 clients before it: a
-- renewal of ARGV[1] that reaches the node after this release (sent
-- before it, or on another connection) finds it not held and leaves the
-- end where it is. This script alone recognises it as ARGV[1]'s own: the
-- same release sent again (a replay after a failover) sets the same end
-- again and answers 1, and a release of ARGV[1] without an end leaves the
-- kept hold as it is and answers 1.
-- With ARGV[4] passed, the lock is freed as without it.
-- When freed or kept, publishes `ARGV[2]:ARGV[3]` on the channel named
-- KEYS[1] if a caller found the lock held (uncontended releases publish
-- nothing): a waiter tries again and learns the new expiry; a publish
-- refused (NOPERM: no rights on the channel) is ignored. A freed lock with
-- a client on its record of waiting clients (see read.lua) names the
-- earliest instead, `=<client>:ARGV[3]`, takes it off the record and reads
-- `L1:<fence>:f:=ARGV[1]`: only that client tries at once (the others,
-- after a pause, if no other release came meanwhile).
-- On a shared kind's hash: frees the owner's hold, or withdraws its place
-- in a line (a waiting writer's claim, a fair waiter's ticket: answered -1);
-- see ../shared/hash.lua.
-- Returns 1 when the lock was freed, or kept until ARGV[4]; when ARGV[1]
-- did not hold it, nothing changed and the answer says what the freed
-- value or the record of who freed it tells (ended, read.lua): -2 its own
-- release freed it already (this one was sent again), -3 an operator freed
-- it, {-4, fence} another owner holds it now with that fence, -4 another
-- owner held it since, -1 it is gone and nothing names who freed it
-- (erased, expired, or the record lapsed; a shared kind's release whose
-- hold is gone answers -1 too).
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
local kept = ARGV[1] .. '/kept'
if not fence or state == 'f' or (holder ~= ARGV[1] and holder ~= kept) then
  local why = ended(key, state, holder, ARGV[1])
  if why == 0 and fence and state ~= 'f' then
    return {-4, tonumber(fence)}
  end
  return ({[0] = -4, [1] = -1, [2] = -3, [3] = -2})[why]
end
if holder == kept and not ARGV[4] then
  return 1
end
local left = 0
if ARGV[4] then
  local now = server_time()
  left = tonumber(ARGV[4]) - (tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000))
end
local named
if left > 0 then
  redis.call('set', key, 'L1:' .. fence .. ':' .. state .. ':' .. kept, 'px', left)
elseif state == 'w' then
  named = next_waiting(key)
  redis.call('set', key, 'L1:' .. fence .. (named and ':f:=' or ':f:+') .. ARGV[1], 'keepttl')
else
  redis.call('set', key, 'L1:' .. fence .. ':f:' .. ARGV[1], 'keepttl')
end
if state == 'w' then
  local message = ARGV[2] .. ':' .. ARGV[3]
  if named then
    message = '=' .. named .. ':' .. ARGV[3]
  end
  -- pcall: the lock is freed now, whatever the publish does; a user without
  -- rights on the channel (NOPERM) must not make the release look failed.
  redis.pcall('publish', key, message)
end
return 1
