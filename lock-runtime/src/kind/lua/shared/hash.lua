-- The shared kinds' lock: a hash at the lock's key (see
-- docs/redis-layout.md, "Lock kinds"), read and changed by one set of
-- functions that every script prepends (after read.lua), so that the
-- exclusive scripts see the shared kinds' holders and waiters too.
--
-- Fields:
--   k          the kind: `r` readers, `p:<N>` at most N permit holders,
--              `q` fair
--   f          the last fencing token given for the key
--   h:<owner>  a holder: `<expiry ms>:<token>`, the expiry by the server's
--              clock (`TIME`), so that each holder has its own lease
--   ww         readers only: a waiting writer, `<owner>:<expiry ms>`; new
--              readers wait while it lives
--   w          `1` when a caller was refused since the last notice: the
--              next release that frees a place publishes
--   qt         fair only: the next ticket number
--   q:<n>      fair only: the waiter with ticket n, `<owner>:<expiry ms>`
-- Entries past their expiry count as absent and are deleted by the next
-- script that reads the hash. The key's own expiry is never earlier than
-- any entry's.
--
-- The shared kinds' scripts have these functions at their top level. The
-- exclusive lock's scripts have them inside `hash_lib()` (see
-- `kind/sources.rs` and `exports.lua`), which they call only when they
-- meet a hash: a script runs its top level on every call, and making these
-- functions each time would cost the plain lock's hot path.

-- The server's time: milliseconds and microseconds since the epoch.
local function server_now()
  local t = redis.call('time')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

-- What a kind is called in errors, as the attribute writes it.
local function kind_name(kind)
  if kind == 'r' then
    return 'a read-write lock held by readers (mode = "read")'
  elseif kind == 'q' then
    return 'a fair lock (fair = true)'
  elseif kind == 'x' then
    return 'a plain or write lock (no mode, or mode = "write")'
  end
  local n = string.match(kind or '', '^p:(%d+)$')
  if n then
    return 'a counted lock (permits = ' .. n .. ')'
  end
  return 'an unknown kind (' .. tostring(kind) .. ')'
end

-- The error of a call asking for `asked` on a key live as `found`.
local function kind_error(key, found, asked)
  return redis.error_reply('LOCKKIND ' .. key .. ' is ' .. kind_name(found) .. '; asked for ' .. kind_name(asked))
end

-- The hash at `key` as of `now` (ms), with the expired entries deleted:
-- {kind, fence, holders = {owner = {exp, token}}, count, earliest, latest,
--  ww = {owner, exp} or nil, marked, queue = {{n, owner, exp}...} in ticket
--  order, next_ticket, bad}. `flat` is the HGETALL answer; `readonly`
-- leaves the expired entries in place.
local function read_hash(key, flat, now, readonly)
  local h = {fence = 0, holders = {}, count = 0, earliest = nil, latest = now,
    queue = {}, next_ticket = 1, marked = false, others = 0}
  local dead = {}
  for i = 1, #flat, 2 do
    local field, value = flat[i], flat[i + 1]
    local tag = string.sub(field, 1, 2)
    if field == 'k' then
      h.kind = value
    elseif field == 'f' then
      h.fence = tonumber(value) or 0
    elseif field == 'w' then
      h.marked = true
    elseif field == 'qt' then
      h.next_ticket = tonumber(value) or 1
    elseif tag == 'h:' then
      local exp, token = string.match(value, '^(%d+):(%d+)$')
      exp = tonumber(exp)
      if exp and exp > now then
        h.holders[string.sub(field, 3)] = {exp, token}
        h.count = h.count + 1
        if not h.earliest or exp < h.earliest then h.earliest = exp end
        if exp > h.latest then h.latest = exp end
      else
        dead[#dead + 1] = field
      end
    elseif field == 'ww' or tag == 'q:' then
      local owner, exp = string.match(value, '^(.*):(%d+)$')
      exp = tonumber(exp)
      if exp and exp > now then
        if exp > h.latest then h.latest = exp end
        if field == 'ww' then
          h.ww = {owner, exp}
        else
          h.queue[#h.queue + 1] = {tonumber(string.sub(field, 3)), owner, exp}
        end
      else
        dead[#dead + 1] = field
      end
    end
  end
  if not h.kind or tonumber(h.fence) > MAX_FENCE then
    h.bad = redis.error_reply('LOCKLAYOUT ' .. key .. ' holds a hash that is no lock of layout 1 (an older lock-runtime, another library, or not a lock)')
  end
  if #dead > 0 and not readonly then
    redis.call('hdel', key, unpack(dead))
  end
  if #h.queue > 1 then
    table.sort(h.queue, function(a, b) return a[1] < b[1] end)
  end
  return h
end

-- Whether the hash has anything live: a holder, a waiting writer, a fair
-- waiter. A hash with none is free: any kind may take it.
local function is_live(h)
  return h.count > 0 or h.ww ~= nil or #h.queue > 0
end

-- The next fencing token after `fence`, by the server clock `now_us`.
local function next_token(key, fence, now_us)
  local token = math.max(fence + 1, now_us)
  if token > MAX_FENCE then
    return nil, redis.error_reply('LOCKLAYOUT ' .. key .. ' has no fencing token left below 2^53 - 1 (its fence or the server clock is past it)')
  end
  return token, nil
end

-- Makes the key live at least until `exp` (ms, `now` the server time).
local function keep_until(key, exp, now)
  local ms = exp - now
  if redis.call('pttl', key) < ms then
    redis.call('pexpire', key, ms)
  end
end

-- Publishes that a place at `key` freed, and clears the mark.
local function announce(key, message)
  redis.call('hdel', key, 'w')
  redis.pcall('publish', key, message)
end

-- The fair line's next waiter's notice: `>` and its owner id, so that only
-- its client tries.
local function announce_next(key, h, skip)
  for _, waiter in ipairs(h.queue) do
    if waiter[2] ~= skip then
      announce(key, '>' .. waiter[2])
      return
    end
  end
end

-- The hold or place of `owner` at `key` (a hash) given up: a holder
-- frees its place (1); a waiting writer or a fair waiter leaves the line
-- (-1, as for anything else: nothing was held). `flat` is the HGETALL
-- answer. Publishes
-- `client:token` when a place opens for the callers that were refused,
-- and in a fair line `>` and the next waiter's owner id.
local function hash_release(key, flat, owner, client, token)
  if #flat == 0 then
    return -1
  end
  local now = server_now()
  local h = read_hash(key, flat, now)
  if h.bad then
    return h.bad
  end
  if h.holders[owner] then
    redis.call('hdel', key, 'h:' .. owner)
    h.count = h.count - 1
    if h.kind == 'q' then
      announce_next(key, h, nil)
    elseif h.marked and (h.kind ~= 'r' or h.count == 0) then
      announce(key, client .. ':' .. token)
    end
    return 1
  end
  if h.ww and h.ww[1] == owner then
    redis.call('hdel', key, 'ww')
    if h.marked then
      announce(key, client .. ':0')
    end
    return -1
  end
  for i, waiter in ipairs(h.queue) do
    if waiter[2] == owner then
      redis.call('hdel', key, 'q:' .. string.format('%d', waiter[1]))
      if i == 1 and h.count == 0 then
        announce_next(key, h, owner)
      end
      return -1
    end
  end
  return -1
end

-- Resets the lease of `owner`'s hold at `key` (a hash) to `lease` ms:
-- 1 when it held it, 0 otherwise.
local function hash_renew(key, owner, lease)
  local value = redis.call('hget', key, 'h:' .. owner)
  if not value then
    return 0
  end
  local exp, token = string.match(value, '^(%d+):(%d+)$')
  local now = server_now()
  if not exp or tonumber(exp) <= now then
    return 0
  end
  local until_ms = now + tonumber(lease)
  redis.call('hset', key, 'h:' .. owner, string.format('%d', until_ms) .. ':' .. token)
  keep_until(key, until_ms, now)
  return 1
end

-- A writer (`owner`, lease and waiter lease in ms) meets a hash at `key`:
-- takes it when nobody lives there (the key becomes the exclusive string,
-- keeping the fence), waits behind readers (and keeps its claim `ww` so
-- that new readers wait behind it: answered as {-2 - ttl}), or fails with
-- LOCKKIND on another kind.
local function writer_meets_hash(key, owner, lease, waiter_lease)
  local now, now_us = server_now()
  local h = read_hash(key, redis.call('hgetall', key), now)
  if h.bad then
    return h.bad
  end
  if is_live(h) and h.kind ~= 'r' then
    return kind_error(key, h.kind, 'x')
  end
  local mine = h.ww and h.ww[1] == owner
  if h.count > 0 or (h.ww and not mine) then
    redis.call('hset', key, 'w', '1')
    if h.ww and not mine then
      return -2 - (h.latest - now)
    end
    local exp = now + tonumber(waiter_lease or 5000)
    redis.call('hset', key, 'ww', owner .. ':' .. string.format('%d', exp))
    keep_until(key, exp, now)
    return {-2 - (h.latest - now)}
  end
  local token, bad = next_token(key, h.fence, now_us)
  if bad then
    return bad
  end
  local state = 'h'
  if h.marked then
    state = 'w'
  end
  redis.call('set', key, 'L1:' .. string.format('%d', token) .. ':' .. state .. ':' .. owner, 'px', lease)
  return token
end

-- Raises the fence of `owner`'s hold at `key` (a hash) to `raised`: 1 when
-- it holds it, 0 otherwise.
local function hash_fence(key, owner, raised)
  local value = redis.call('hget', key, 'h:' .. owner)
  if not value then
    return 0
  end
  local exp, token = string.match(value, '^(%d+):(%d+)$')
  local now = server_now()
  if not exp or tonumber(exp) <= now then
    return 0
  end
  local raised_text = string.format('%d', tonumber(raised))
  if tonumber(token) < tonumber(raised) then
    redis.call('hset', key, 'h:' .. owner, exp .. ':' .. raised_text)
  end
  local fence = tonumber(redis.call('hget', key, 'f') or '0')
  if fence < tonumber(raised) then
    redis.call('hset', key, 'f', raised_text)
  end
  return 1
end

-- The hash at `key` as inspect.lua answers: {fence, state, holder, pttl},
-- state `h` held or `f` free, the holder the one of its holders whose
-- lease ends last, and the time until then.
local function hash_inspect(key)
  local now = server_now()
  local h = read_hash(key, redis.call('hgetall', key), now, true)
  if h.bad then
    return h.bad
  end
  if h.count == 0 then
    return {string.format('%d', h.fence), 'f', '', tostring(redis.call('pttl', key))}
  end
  local last, last_exp = '', 0
  for owner, hold in pairs(h.holders) do
    if hold[1] > last_exp or (hold[1] == last_exp and owner < last) then
      last, last_exp = owner, hold[1]
    end
  end
  return {string.format('%d', h.fence), 'h', last, tostring(last_exp - now)}
end

-- Frees every hold at `key` (a hash) and drops a waiting writer's claim;
-- fair waiters keep their places. Publishes as a release does. Returns the
-- fence when something was held, else 0.
local function hash_force(key, client)
  local now = server_now()
  local h = read_hash(key, redis.call('hgetall', key), now)
  if h.bad then
    return h.bad
  end
  if h.count == 0 and not h.ww then
    return 0
  end
  for owner, _ in pairs(h.holders) do
    redis.call('hdel', key, 'h:' .. owner)
  end
  redis.call('hdel', key, 'ww')
  if h.kind == 'q' then
    announce_next(key, h, nil)
  else
    announce(key, client .. ':' .. string.format('%d', h.fence))
  end
  if h.count == 0 then
    return 0
  end
  return h.fence
end
