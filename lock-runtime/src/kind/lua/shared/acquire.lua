-- Take a shared kind's lock for one acquisition: a reader, a permit holder
-- or a fair holder (see hash.lua for the hash it keeps).
-- KEYS[1]  the lock
-- ARGV[1]  the acquisition's owner id
-- ARGV[2]  the lease in milliseconds
-- ARGV[3]  the kind: `r` reader, `p` one of at most ARGV[5] holders, `q` fair
-- ARGV[4]  the waiter lease in milliseconds: how long a fair waiter's
--          place lives without a heartbeat (its next request)
-- ARGV[5]  for `p`: the count N (the hash keeps the kind as `p:<N>`)
-- ARGV[6]  `1` when other callers of the same client wait behind this one:
--          a grant then marks the key as waited for, so that the next
--          release that opens a place publishes (they were never refused
--          themselves: only the head of a client's line asks)
-- Returns:
-- {token, room} when ARGV[1] holds it now: its fencing token (the next one
-- for the key: tokens rise across kinds; or its own, when it held it
-- already: a retried request) and room 1 when another caller of the kind
-- could enter now too;
-- -2 - ttl when it may not enter: ttl is the time in milliseconds until the
-- earliest moment that may change without a notice (a holder's or claim's
-- expiry); the refusal is marked, so the next release that opens a place
-- publishes;
-- {-2 - ttl, held} when a fair caller waits in line: its place (a ticket,
-- kept for the waiter lease from now) stays until it gives up (a release of
-- the same owner id) or stops asking; ttl is as above (the holder's expiry
-- or a place ahead's, whichever comes first), held the time in
-- milliseconds that the holder's lease has left (0: nobody holds it, a
-- waiter ahead goes first), for the caller's events.
-- Errors with LOCKKIND when the key is live as another kind (a plain or
-- write lock held, against permits or fair), and with LOCKLAYOUT when it
-- holds something that is no lock.
-- Reads with read_lock (read.lua) and read_hash (hash.lua), prepended.
local key, owner, kind = KEYS[1], ARGV[1], ARGV[3]
if kind == 'p' then
  kind = 'p:' .. ARGV[5]
end
local lease = tonumber(ARGV[2])
local now, now_us = server_now()
local flat = redis.pcall('hgetall', key)
local fresh = #flat == 0
if flat.err then
  -- The exclusive lock's string, or something else.
  local fence, state, holder, bad = read_lock(key)
  if bad then
    return bad
  end
  if state ~= 'f' then
    if kind ~= 'r' then
      return kind_error(key, 'x', kind)
    end
    if state == 'h' then
      redis.call('set', key, 'L1:' .. fence .. ':w:' .. holder, 'keepttl')
    end
    return -2 - redis.call('pttl', key)
  end
  -- Free: the hash takes its place, and its fence.
  redis.call('del', key)
  flat = {'f', fence}
  fresh = true
end
local h = read_hash(key, flat, now)
if fresh then
  h.bad = nil
end
if h.bad then
  return h.bad
end
-- A free hash (nothing live) takes the kind asked for.
local set_kind = h.kind ~= kind
if set_kind then
  if is_live(h) then
    return kind_error(key, h.kind, kind)
  end
  if h.next_ticket ~= 1 then
    redis.call('hdel', key, 'qt')
    h.next_ticket = 1
  end
end
local exp = now + lease
local mine = h.holders[owner]
if mine then
  redis.call('hset', key, 'h:' .. owner, string.format('%d', exp) .. ':' .. mine[2])
  keep_until(key, exp, now)
  return {tonumber(mine[2]), 0}
end
-- Whether it may enter; if not, until when nothing changes unannounced.
local wait_until = nil
local permits = tonumber(string.match(kind, '^p:(%d+)$'))
if kind == 'r' then
  if h.ww then
    -- Told when the writer leaves; its claim's end is unannounced.
    wait_until = h.ww[2]
  end
elseif kind == 'q' then
  if h.count > 0 then
    wait_until = h.earliest
  end
  -- A waiter ahead whose place lapses (its process died) is unannounced.
  for _, waiter in ipairs(h.queue) do
    if waiter[2] == owner then
      break
    end
    if not wait_until or waiter[3] < wait_until then
      wait_until = waiter[3]
    end
  end
elseif h.count >= permits then
  wait_until = h.earliest
end
if wait_until then
  redis.call('hset', key, 'w', '1')
  if kind ~= 'q' then
    return -2 - (wait_until - now)
  end
  local waiter_exp = string.format('%d', now + tonumber(ARGV[4]))
  local ticket = nil
  for _, waiter in ipairs(h.queue) do
    if waiter[2] == owner then
      ticket = waiter[1]
    end
  end
  if not ticket then
    ticket = h.next_ticket
    redis.call('hset', key, 'qt', string.format('%d', ticket + 1))
  end
  redis.call('hset', key, 'q:' .. string.format('%d', ticket), owner .. ':' .. waiter_exp)
  keep_until(key, tonumber(waiter_exp), now)
  local held = 0
  if h.count > 0 then
    held = h.earliest - now
  end
  return {-2 - (wait_until - now), held}
end
local token, bad = next_token(key, h.fence, now_us)
if bad then
  return bad
end
local text = string.format('%d', token)
local hold = string.format('%d', exp) .. ':' .. text
if set_kind then
  redis.call('hset', key, 'k', kind, 'f', text, 'h:' .. owner, hold)
else
  redis.call('hset', key, 'f', text, 'h:' .. owner, hold)
end
if ARGV[6] == '1' then
  redis.call('hset', key, 'w', '1')
end
if kind == 'q' and #h.queue > 0 and h.queue[1][2] == owner then
  redis.call('hdel', key, 'q:' .. string.format('%d', h.queue[1][1]))
end
if fresh then
  redis.call('pexpire', key, lease)
else
  keep_until(key, exp, now)
end
local room = 0
if (kind == 'r' and not h.ww) or (permits and h.count + 1 < permits) then
  room = 1
end
return {token, room}
