#!lua
-- flow_cancel: cancel a call. A run that sleeps or waits (no replay holds its lease) ends now;
-- a running one is asked to stop: its replay's next write answers "canceled", and the worker's
-- supervisor interrupts its running step (flow_renew answers "canceled").
--
-- KEYS[1]  <ns>:<fns>:{<call>}_meta     hash
-- KEYS[2]  <ns>:<fns>:{<call>}_status   hash
-- KEYS[3]  <ns>:<fns>:{<call>}_lease    string
-- ARGV[1]  reason
-- ARGV[2]  retention of a run canceled now, in seconds
-- Returns  "canceled" (ended now), "requested" (a replay runs: it stops at its next write or
--          when its step is interrupted), "finished" (had ended already) or "gone"; an error
--          naming a key that has another type: nothing changed.
local bad = wrong_type(KEYS[1], 'hash', KEYS[2], 'hash', KEYS[3], 'string') or ended(KEYS[1])
if bad then
  return bad
end
redis.call('HSET', KEYS[1], 'cancel', ARGV[1])
if redis.call('EXISTS', KEYS[3]) == 1 then
  return 'requested'
end
redis.call('HSET', KEYS[1], 'status', 'canceled', 'error', 'canceled: ' .. ARGV[1],
  'finished_at', tostring(clock()))
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return 'canceled'
