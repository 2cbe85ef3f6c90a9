-- Reset the lease of many held locks in one call.
-- KEYS[i]      a lock (see acquire.lua)
-- ARGV[1]      the lease of every lock of the call, in milliseconds
-- ARGV[i + 1]  what KEYS[i] holds while the acquisition that holds it holds
--              it and nobody has marked it waited for:
--              `L1:<fence>:h:<owner>`, with the fence its acquire answered
--              (for a shared kind's hold, only its owner id is read)
-- Returns, for each lock not renewed, in order, 4 * i + why (an empty
-- array when every lease was reset), where why says what the freed value
-- or the record of who freed it tells (ended, read.lua): 0 another owner
-- holds it or held it since, or it holds something else (a wrong type, or
-- a string that acquire.lua refuses with LOCKLAYOUT: another state, a fence
-- above 2^53 - 1); 1 gone or free with nothing naming another owner (a
-- shared kind's hold that is gone, too); 2 an operator freed it. The owner
-- holds no lock of layout 1 there, and only that lock is reported, not the
-- batch.
--
-- One MGET reads every lock. A lock that holds exactly ARGV[i + 1] is
-- renewed at once; any other is read by the one rule (read_lock, read.lua,
-- prepended) and renewed when its owner still holds it: marked `w` by a
-- waiter, or with another fence (a Redlock node the holder's write-back of
-- the fence did not reach). A shared kind's holder (a hash) has its own
-- expiry reset (../shared/hash.lua). The new expiry is this node's TIME
-- plus the lease, by PEXPIREAT: what PEXPIRE sets, without its rewrite
-- into PEXPIREAT on every call.
if #KEYS == 0 then
  return {}
end
local lease = ARGV[1]
local now = redis.call('time')
local at = string.format('%d', tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(lease))
local values
if #KEYS <= 1000 then
  values = redis.call('mget', unpack(KEYS))
else
  -- In slices: unpack() pushes every key on Lua's stack, which holds some
  -- 8,000 values.
  values = {}
  for first = 1, #KEYS, 1000 do
    local last = math.min(first + 999, #KEYS)
    local slice = redis.call('mget', unpack(KEYS, first, last))
    for j = 1, last - first + 1 do
      values[first + j - 1] = slice[j]
    end
  end
end
local lib = nil
-- True when `owner` still holds the lock at `key`, by the one rule: its
-- lease is then reset; otherwise why not (see above).
local function renew_read(key, owner)
  if not owner then
    return 0
  end
  local fence, state, holder, bad, hash = read_lock(key)
  if hash then
    lib = lib or hash_lib()
    return lib.hash_renew(key, owner, lease) == 1 or 1
  end
  if bad then
    return 0
  end
  if fence and state ~= 'f' and holder == owner then
    redis.call('pexpireat', key, at)
    return true
  end
  local why = ended(key, state, holder, owner)
  -- Its own release freed it: the body has ended, and its release tells.
  if why == 3 then
    return 1
  end
  return why
end
local failed = {}
-- The hot loop: a numeric for and a local `call`, a few percent less than
-- ipairs() and a lookup of redis.call per lock.
local call = redis.call
for i = 1, #KEYS do
  local key, expected = KEYS[i], ARGV[i + 1]
  if values[i] == expected then
    call('pexpireat', key, at)
  else
    local renewed = renew_read(key, string.match(expected, '^L1:%d+:h:(.*)$'))
    if renewed ~= true then
      failed[#failed + 1] = 4 * i + renewed
    end
  end
end
return failed
