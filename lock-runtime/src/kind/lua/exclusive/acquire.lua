-- Take a lock for one acquisition, and give it its fencing token.
-- KEYS[1]  the lock: a string `L1:<fence>:<state>:<owner>` with the lease as
--          its expiry (see docs/redis-layout.md); state `h` held, `w` held
--          and waited for (its release publishes), `f` free; fence a
--          decimal of at most 2^53 - 1 = 9007199254740991, the largest
--          integer from which Lua numbers carry every smaller one exactly
-- ARGV[1]  the acquisition's owner id
-- ARGV[2]  the lease in milliseconds
-- ARGV[3]  optional: the waiter lease in milliseconds (5000 if absent), for
--          a writer that waits behind readers (see ../shared/hash.lua)
-- ARGV[4]  optional: `1` when the call holds the lock at least some time
--          after it took it (`hold_at_least`): a grant then answers
--          {token, now_ms}, where now_ms is this node's TIME in ms that the
--          script read, from which the client counts the hold's end on
--          this node (see release.lua). Refusals answer as without it.
-- Returns one integer (a table would cost the server more), without ARGV[4]:
-- the fencing token (> 0) when ARGV[1] holds the lock: a new token, or the
-- same one when this acquisition already holds it (a retried request, or
-- on Redlock an earlier attempt of the same call whose give-back did not
-- reach this node). Then the lease is reset to ARGV[2], value kept: the
-- client counts its lease from this request, so the node must keep the
-- hold at least that long;
-- -2 - ttl when another owner holds it, where ttl is the holder's remaining
-- lease in milliseconds (so -1 when the key has no expiry); the caller's
-- client is then recorded as waiting (see note_waiting in read.lua).
-- On a shared kind's hash: takes it when nothing lives there; behind
-- readers, {-2 - ttl} (the writer now keeps a claim that new readers wait
-- behind, for the waiter lease); LOCKKIND on another kind.
-- Errors with LOCKLAYOUT when the key holds anything else (another state, a
-- larger fence: every script reads a value by the same rule), and when no
-- token after the kept one fits in that bound.
--
-- A new token is the larger of the kept token + 1 and the server time in
-- microseconds, so tokens keep increasing when the key is gone and when an
-- older value comes back (a restart from a snapshot), as long as the server
-- clock does not step back.
-- Reads the stored lock with read_lock (read.lua, prepended).
local key, owner = KEYS[1], ARGV[1]
local kept, state, holder, bad, hash = read_lock(key)
if hash then
  local answer = hash_lib().writer_meets_hash(key, owner, ARGV[2], ARGV[3])
  if ARGV[4] and type(answer) == 'number' and answer > 0 then
    local now = server_time()
    return {answer, tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)}
  end
  return answer
end
if bad then
  return bad
end
local fence = 0
if kept then
  fence = tonumber(kept)
  if state ~= 'f' then
    if holder == owner then
      redis.call('pexpire', key, ARGV[2])
      if ARGV[4] then
        local now = server_time()
        return {fence, tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)}
      end
      return fence
    end
    if state == 'h' then
      redis.call('set', key, 'L1:' .. kept .. ':w:' .. holder, 'keepttl')
    end
    local ttl = redis.call('pttl', key)
    note_waiting(key, owner, ttl)
    return -2 - ttl
  end
end
local now = server_time()
local token = math.max(fence + 1, tonumber(now[1]) * 1000000 + tonumber(now[2]))
if token > MAX_FENCE then
  return redis.error_reply('LOCKLAYOUT ' .. key .. ' has no fencing token left below 2^53 - 1 (its fence or the server clock is past it)')
end
-- A lock freed by a release that named a waiting client: others may wait
-- still, and this hold's release must tell them. Who freed it is kept in
-- the record of its own (note_freed, read.lua).
local taken = 'h'
if state == 'f' then
  if string.sub(holder, 1, 1) == '=' and others_waiting(key, owner) then
    taken = 'w'
  end
  note_freed(key, holder)
end
redis.call('set', key, 'L1:' .. string.format('%d', token) .. ':' .. taken .. ':' .. owner, 'px', ARGV[2])
if ARGV[4] then
  return {token, tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)}
end
return token
