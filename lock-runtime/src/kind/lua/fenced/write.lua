-- A fenced write: the user's commands, run only for a token at least the
-- highest that wrote the resource (a holder paused past its lease, whose
-- lock a newer holder took, is refused by the resource itself).
-- KEYS[1]   the resource's fence key (see docs/redis-layout.md, "Fenced
--           writes"): the highest token that wrote it, a decimal string
-- KEYS[2..] the commands' keys, in command order
-- ARGV[1]   the token: a decimal of at most 2^53 - 1
-- ARGV[2]   the resource's name, for the refusal
-- ARGV[3]   the number of commands; then for each: its name, how many
--           keys it takes from KEYS (in turn), how many other arguments,
--           then those arguments
-- Refuses, with ERR and before anything runs, a command that names the
-- fence key as a key (a DEL of it would reset the fence) and the keyless
-- FLUSHALL, FLUSHDB and SWAPDB (they erase or move it with the rest).
-- Refuses a token below the stored one with
-- `LOCKFENCED <resource> <stored> <given>`: no command runs. Otherwise
-- stores the token (the larger of the two; no expiry) and runs the commands
-- in order, answering their replies as an array. A command that fails
-- fails the script there: the commands before it and the fence stay
-- written (Redis does not roll a script back).
local fence_key, given, resource = KEYS[1], ARGV[1], ARGV[2]
if not string.match(given, '^%d+$') or tonumber(given) > 9007199254740991 then
  return redis.error_reply('ERR fenced write: the token ' .. given .. ' is not a decimal of at most 2^53 - 1')
end
for i = 2, #KEYS do
  if KEYS[i] == fence_key then
    return redis.error_reply('ERR fenced write on ' .. resource .. ': a command names the fence key ' .. fence_key .. ' as a key')
  end
end
local look = 4
for _ = 1, tonumber(ARGV[3]) do
  local name = string.lower(ARGV[look])
  if name == 'flushall' or name == 'flushdb' or name == 'swapdb' then
    return redis.error_reply('ERR fenced write on ' .. resource .. ': ' .. ARGV[look] .. ' would erase or move the fence')
  end
  look = look + 3 + tonumber(ARGV[look + 2])
end
local stored = redis.call('get', fence_key)
if stored and tonumber(stored) > tonumber(given) then
  return redis.error_reply('LOCKFENCED ' .. resource .. ' ' .. stored .. ' ' .. given)
end
if not stored or tonumber(stored) < tonumber(given) then
  redis.call('set', fence_key, given)
end
local replies, next_key, at = {}, 2, 4
for i = 1, tonumber(ARGV[3]) do
  local call = {ARGV[at]}
  local nkeys, nargs = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  at = at + 3
  for _ = 1, nkeys do
    call[#call + 1] = KEYS[next_key]
    next_key = next_key + 1
  end
  for _ = 1, nargs do
    call[#call + 1] = ARGV[at]
    at = at + 1
  end
  replies[i] = redis.call(unpack(call))
end
return replies
