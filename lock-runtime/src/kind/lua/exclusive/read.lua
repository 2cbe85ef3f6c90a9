-- Reading a stored lock, by the one rule every script of layout 1 follows
-- (see docs/redis-layout.md). Prepended to each script when it is built.
--
-- server_time() is the server's TIME, as {seconds, microseconds}.
--
-- read_lock(key) returns fence, state, holder, bad, hash:
-- - nil for all when the key is absent;
-- - hash true (the others nil) when it holds a hash: a shared kind's lock
--   (readers, permits, fair; see ../shared/hash.lua), which that file's
--   functions read;
-- - the value's parts when it holds a lock of layout 1: a fence of at most
--   2^53 - 1 = 9007199254740991 (the largest integer from which Lua numbers
--   carry every smaller one exactly), a state `h` held, `w` held and waited
--   for, `f` free, and the holder's owner id (empty when free);
-- - bad, a LOCKLAYOUT error reply, when it holds anything else: another
--   type, another state, a larger fence.
local MAX_FENCE = 9007199254740991
-- The server's TIME (a batch of calls reads it once: see ../several/batch.lua).
local function server_time()
  return redis.call('time')
end
local function read_lock(key)
  local value = redis.pcall('get', key)
  if not value then
    return nil, nil, nil, nil
  end
  if type(value) == 'table' and value.err and redis.call('type', key).ok == 'hash' then
    return nil, nil, nil, nil, true
  end
  local fence, state, holder
  if type(value) == 'string' then
    fence, state, holder = string.match(value, '^L1:(%d+):([hwf]):(.*)$')
  end
  if not fence then
    return nil, nil, nil, redis.error_reply('LOCKLAYOUT ' .. key .. ' holds no lock of layout 1 (an older lock-runtime, another library, or not a lock)')
  end
  -- Compared as text (cheaper than tonumber): the scripts write fences
  -- without leading zeros, and one of 16 digits compares by its digits.
  if #fence > 16 or (#fence == 16 and fence > '9007199254740991') then
    return nil, nil, nil, redis.error_reply('LOCKLAYOUT ' .. key .. ' holds the fence ' .. fence .. ', above 2^53 - 1: Lua numbers do not carry it exactly')
  end
  return fence, state, holder, nil
end


-- A record that a lock's scripts keep beside it, in its hash slot: the
-- lock's name with `suffix` after it, and the lock's name as the hash tag
-- when the lock has none; nil (no record) when the lock's name has braces
-- but no hash tag.
local function record_key(key, suffix)
  local open = string.find(key, '{', 1, true)
  if not open then
    if string.find(key, '}', 1, true) then
      return nil
    end
    return key .. suffix .. '{' .. key .. '}'
  end
  local close = string.find(key, '}', open + 1, true)
  if close and close > open + 1 then
    return key .. suffix
  end
  return nil
end
-- The clients that wait on a lock: a hash (see record_key, `:waiting`) of
-- each waiting client's id to its place (1 + the largest place there when
-- it first found the lock held). A contended release names the client with
-- the smallest place in its notice, and only that client tries at once
-- (see release.lua); a freed lock whose release named one reads
-- `L1:<fence>:f:=<name>`. The record only saves work: its commands go by
-- pcall, and one refused (an ACL without them) leaves releases waking every
-- client.
local function waiting_key(key)
  return record_key(key, ':waiting')
end
-- The record's fields (see waiting_key), {} when it cannot be read.
local function waiting_fields(waiting)
  local fields = redis.pcall('hgetall', waiting)
  if type(fields) ~= 'table' or fields.err then
    return {}
  end
  return fields
end
-- Records the client of the owner id `owner` (`<client>:<n>`) as waiting
-- on `key`, which another owner holds for `ttl` ms more, keeping its
-- place; the record lives a minute past the hold.
local function note_waiting(key, owner, ttl)
  local waiting = waiting_key(key)
  local client = string.match(owner, '^(.*):%d+$')
  if not waiting or not client then
    return
  end
  local fields = waiting_fields(waiting)
  local last = 0
  for i = 1, #fields, 2 do
    if fields[i] == client then
      last = nil
      break
    end
    last = math.max(last, tonumber(fields[i + 1]) or 0)
  end
  if last then
    redis.pcall('hset', waiting, client, last + 1)
  end
  redis.pcall('pexpire', waiting, math.max(ttl, 0) + 60000)
end
-- Takes the waiting client with the smallest place off the record of
-- `key`: its id, or nil when none waits (or the lock has no record).
local function next_waiting(key)
  local waiting = waiting_key(key)
  if not waiting then
    return nil
  end
  local fields = waiting_fields(waiting)
  local first, place
  for i = 1, #fields, 2 do
    local at = tonumber(fields[i + 1])
    if at and (not place or at < place) then
      first, place = fields[i], at
    end
  end
  if first then
    redis.pcall('hdel', waiting, first)
  end
  return first
end
-- For an acquisition by `owner` of a lock freed with a waiting client
-- named: takes its client off the record, and whether others still wait
-- (the lock is then taken marked waited for).
local function others_waiting(key, owner)
  local waiting = waiting_key(key)
  if not waiting then
    return false
  end
  local client = string.match(owner, '^(.*):%d+$')
  if client then
    redis.pcall('hdel', waiting, client)
  end
  return #waiting_fields(waiting) > 0
end
-- Who freed a lock. A freed value names it after its state: the owner id
-- of the hold that its own release freed, or `!` and that owner id when an
-- operator freed it (force_unlock.lua); behind a mark when a caller found
-- the hold held (`=` when the release named a waiting client, `+` when it
-- did not); nothing in a value a client of 0.1 freed. An acquire that
-- takes a freed value with a mark or an operator's name moves the name to
-- a record of its own (see record_key, `:freed`), which lives as long as
-- the freed hold's lease had left, so that a release or a renewal of that
-- hold that comes later (sent again after a lost answer, or by redis-rs's
-- retry) still learns who freed it: a waiter takes a contended lock at
-- once. An uncontended lock taken again (one task's loop on its own key)
-- writes no record. Its commands go by pcall: an ACL without them leaves
-- only the freed value's name.
local function freed_key(key)
  return record_key(key, ':freed')
end
-- The name a freed value's holder field gives (see freed_key), '' if none.
local function freed_name(holder)
  return string.match(holder or '', '^[=+]?(.*)$')
end
-- For an acquire about to take `key`, freed with the holder field
-- `holder`: keeps a contended free's or an operator's name in the record
-- for the rest of the freed hold's lease.
local function note_freed(key, holder)
  local mark = string.sub(holder, 1, 1)
  if mark ~= '=' and mark ~= '+' and mark ~= '!' then
    return
  end
  local name = freed_name(holder)
  local freed = name ~= '' and freed_key(key)
  if not freed then
    return
  end
  local ttl = redis.call('pttl', key)
  if ttl > 0 then
    redis.pcall('set', freed, name, 'px', ttl)
  end
end
-- Why `owner` no longer holds `key`, whose stored lock (read_lock) is
-- `state` and `holder` (nil when absent), for a release or a renewal that
-- did not find its hold: 3 its own release freed it, 2 an operator freed
-- it, 0 another owner held it since (or holds it now), 1 it is gone with
-- nothing naming who freed it (erased, expired, or the record lapsed).
local function ended(key, state, holder, owner)
  local names = {}
  if state == 'f' then
    names[1] = freed_name(holder)
  end
  local freed = freed_key(key)
  if freed then
    local record = redis.pcall('get', freed)
    if type(record) == 'string' then
      names[#names + 1] = record
    end
  end
  local other = state ~= nil and state ~= 'f'
  for _, name in ipairs(names) do
    if name == owner then
      return 3
    elseif name == '!' .. owner then
      return 2
    elseif name ~= '' then
      other = true
    end
  end
  if other then
    return 0
  end
  return 1
end
