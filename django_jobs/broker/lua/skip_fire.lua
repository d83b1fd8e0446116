#!lua
-- skip_fire: a schedule's fire time passes without a task (paused, overlapping, or missed and
-- not caught up): make it the last fire, so no worker fires it later.
--
-- KEYS[1]  <ns>:schedule:<name>   hash (see fire.lua)
-- ARGV[1]  the fire time (epoch seconds)
-- Returns  1 when ARGV[1] became the last fire, 0 when the last fire was already at or past it
--          (another worker fired or skipped it), or an error if KEYS[1] is not a hash
local bad = wrong_type(KEYS[1], 'hash')
if bad then
  return bad
end
local last = tonumber(redis.call('HGET', KEYS[1], 'last_fire') or '')
if last and last >= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'last_fire', ARGV[1])
return 1
