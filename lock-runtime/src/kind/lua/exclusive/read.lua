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


-- The clients that wait on a lock: a hash, in the lock's hash slot, of
-- each waiting client's id to its place (1 + the largest place there when
-- it first found the lock held). A contended release names the client with
-- the smallest place in its notice, and only that client tries at once
-- (see release.lua); a freed lock whose release named one reads
-- `L1:<fence>:f:=`. Its name is the lock's with `:waiting` after it, and
-- the lock's name as the hash tag when the lock has none; nil (no record:
-- releases wake every client) when the lock's name has braces but no hash
-- tag. The record only saves work: its commands go by pcall, and one
-- refused (an ACL without them) leaves releases waking every client.
local function waiting_key(key)
  local open = string.find(key, '{', 1, true)
  if not open then
    if string.find(key, '}', 1, true) then
      return nil
    end
    return key .. ':waiting{' .. key .. '}'
  end
  local close = string.find(key, '}', open + 1, true)
  if close and close > open + 1 then
    return key .. ':waiting'
  end
  return nil
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
