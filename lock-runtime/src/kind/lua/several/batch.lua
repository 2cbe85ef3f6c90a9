-- Run several acquires and releases of one client, queued at the same
-- moment, in one script call: each as its own script runs it (take_exclusive
-- and give_back, the exclusive acquire.lua and release.lua, prepended as
-- functions), in the order given, with the server's TIME read once for the
-- batch. The calls are unrelated: one call's answer or error is its own,
-- and the calls before and after it run as they would alone.
-- KEYS[i]  the key of the i-th call
-- ARGV     per call, in order: `a` (acquire.lua) or `r` (release.lua), the
--          count n of its arguments, then its n arguments, as its own
--          script takes them
-- Returns an array: per call, its own script's answer, or the error it
-- returned or raised as a string `CODE message` (no answer of these
-- scripts is a string).
local answers = {}
local at = 1
for i = 1, #KEYS do
  local op, n = ARGV[at], tonumber(ARGV[at + 1])
  local args = {}
  for j = 1, n do
    args[j] = ARGV[at + 1 + j]
  end
  at = at + 2 + n
  local run = give_back
  if op == 'a' then
    run = take_exclusive
  end
  local ok, answer = pcall(run, {KEYS[i]}, args)
  if type(answer) == 'table' and answer.err then
    answer = answer.err
  elseif not ok then
    answer = tostring(answer)
  end
  answers[i] = answer
end
return answers
