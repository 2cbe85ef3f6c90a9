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

