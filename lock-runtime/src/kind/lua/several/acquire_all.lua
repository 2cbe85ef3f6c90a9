-- Take several locks for one call, all or nothing: each key as the
-- single-key acquire script of its mode takes it (take_exclusive and
-- take_shared, acquire.lua of each kind, prepended as functions), in the
-- order given; the first refusal gives back the keys taken before it
-- (give_back, the exclusive release.lua, which frees either shape), so the
-- call holds none of them.
-- KEYS     the locks, no key twice, all in one hash slot on Cluster
-- ARGV[1]  the mode: `x` plain or write, `r` reader
-- ARGV[2]  the lease in milliseconds
-- ARGV[3]  the waiter lease in milliseconds (see ../shared/hash.lua)
-- ARGV[3 + i]  the owner id of KEYS[i]: one acquisition per key
-- Returns:
-- {1, token_1, ..., token_n} when every key is held now, each with its
-- fencing token (its own, when the owner held it already: a retried
-- request);
-- {0, i, -2 - ttl} when KEYS[i] may not be taken now: nothing is held,
-- KEYS[i] is marked as waited for (its release publishes), and ttl is as
-- the single-key acquire answers it (-1: no expiry). A writer that meets
-- readers keeps no claim ahead of new readers: the claim the single-key
-- script takes is withdrawn at once (a call that waits for one key of
-- several keeps no place in any line).
-- Errors as the single-key scripts do (LOCKKIND, LOCKLAYOUT), after giving
-- back the keys taken before.
local mode, lease, waiter_lease = ARGV[1], ARGV[2], ARGV[3]
local function undo(upto)
  for j = upto, 1, -1 do
    give_back({KEYS[j]}, {ARGV[3 + j], '', '0'})
  end
end
local tokens = {1}
for i = 1, #KEYS do
  local key, owner = KEYS[i], ARGV[3 + i]
  local answer
  if mode == 'r' then
    answer = take_shared({key}, {owner, lease, 'r', waiter_lease, '', '0'})
  else
    answer = take_exclusive({key}, {owner, lease, waiter_lease})
  end
  if type(answer) == 'table' then
    if answer.err then
      undo(i - 1)
      return answer
    end
    if #answer == 1 then
      -- A writer's claim behind readers: withdrawn, the key kept marked.
      give_back({key}, {owner, '', '0'})
      if redis.call('type', key).ok == 'hash' then
        redis.call('hset', key, 'w', '1')
      end
    end
    answer = answer[1]
  end
  if answer < 0 then
    undo(i - 1)
    return {0, i, answer}
  end
  tokens[i + 1] = answer
end
return tokens
