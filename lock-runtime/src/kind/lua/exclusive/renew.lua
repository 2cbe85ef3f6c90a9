-- Reset the lease of many held locks in one call.
-- KEYS[i]      a lock (see acquire.lua)
-- ARGV[2i-1]   the owner id of the acquisition that holds KEYS[i]
-- ARGV[2i]     the lease of KEYS[i] in milliseconds
-- Returns an array: 1 where the owner still held the lock and its lease was
-- reset, 0 where the lock is gone, free, held by another owner, or holds
-- something else: a wrong type, or a string that acquire.lua refuses with
-- LOCKLAYOUT (another state, a fence above 2^53 - 1). The owner holds no
-- lock of layout 1 there, and only that lock is reported, not the batch.
-- A shared kind's holder (a hash) has its own expiry reset (../shared/hash.lua).
-- Reads the stored lock with read_lock (read.lua, prepended).
local renewed = {}
local lib = nil
for i, key in ipairs(KEYS) do
  renewed[i] = 0
  local fence, state, holder, bad, hash = read_lock(key)
  if hash then
    lib = lib or hash_lib()
    renewed[i] = lib.hash_renew(key, ARGV[2 * i - 1], ARGV[2 * i])
  elseif fence and not bad and state ~= 'f' and holder == ARGV[2 * i - 1] then
    redis.call('pexpire', key, ARGV[2 * i])
    renewed[i] = 1
  end
end
return renewed
