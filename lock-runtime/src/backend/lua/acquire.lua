-- Take or re-enter a lock.
-- KEYS[1]  the lock: a hash of owner id -> hold count
-- ARGV[1]  the owner id
-- ARGV[2]  the lease in milliseconds
-- Returns nil when ARGV[1] now holds the lock (taken, or re-entered with its
-- count raised) with the lease reset; otherwise the holder's remaining lease
-- in milliseconds (-1 when the key has no expiry).
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return nil
end
return redis.call('pttl', KEYS[1])
