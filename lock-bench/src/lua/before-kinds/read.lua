-- Reading a stored lock, by the one rule every script of layout 1 follows
-- (see docs/redis-layout.md). Prepended to each script when it is built.
--
-- read_lock(key) returns fence, state, holder, bad:
-- - nil for all when the key is absent;
-- - the value's parts when it holds a lock of layout 1: a fence of at most
--   2^53 - 1 = 9007199254740991 (the largest integer from which Lua numbers
--   carry every smaller one exactly), a state `h` held, `w` held and waited
--   for, `f` free, and the holder's owner id (empty when free);
-- - bad, a LOCKLAYOUT error reply, when it holds anything else: another
--   type, another state, a larger fence.
local MAX_FENCE = 9007199254740991
local function read_lock(key)
  local value = redis.pcall('get', key)
  if not value then
    return nil, nil, nil, nil
  end
  local fence, state, holder
  if type(value) == 'string' then
    fence, state, holder = string.match(value, '^L1:(%d+):([hwf]):(.*)$')
  end
  if not fence then
    return nil, nil, nil, redis.error_reply('LOCKLAYOUT ' .. key .. ' holds no lock of layout 1 (an older lock-runtime, another library, or not a lock)')
  end
  if tonumber(fence) > MAX_FENCE then
    return nil, nil, nil, redis.error_reply('LOCKLAYOUT ' .. key .. ' holds the fence ' .. fence .. ', above 2^53 - 1: Lua numbers do not carry it exactly')
  end
  return fence, state, holder, nil
end

