#!lua
-- run_now: move a scheduled, retry or dead task to pending at once (admin "retry now").
-- A dead task gets a fresh budget of attempts and crashes; a retry keeps what it has spent.
--
-- KEYS[1]  <ns>:{<q>}:t:<id>        task record
-- KEYS[2]  <ns>:{<q>}:<state>       the sorted set the task is in (scheduled, retry or dead)
-- KEYS[3]  <ns>:{<q>}:pending       list
-- KEYS[4]  <ns>:{<q>}:wake          wake-up tokens
-- ARGV[1]  task id
-- ARGV[2]  "1": reset attempts and crashes (the task was dead); "0": keep them
-- Returns  1 when moved; 0 when the task is not in that set (nothing changed); an error naming a
--          key of KEYS[1..3] that has another type (nothing changed).
local bad = wrong_type(KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'list')
if bad then
  return bad
end
local id = ARGV[1]
if not redis.call('ZSCORE', KEYS[2], id) then
  return 0
end
redis.call('ZREM', KEYS[2], id)
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if ARGV[2] == '1' then
  -- A fresh budget: the counters go (absent reads as 0, as in a record enqueue wrote).
  redis.call('HDEL', KEYS[1], 'attempts', 'crashes', 'died_at', 'first_unknown_at')
end
redis.call('HSET', KEYS[1], 'state', 'pending')
-- A cancel that came too late for an earlier run (it ended completed, retry or dead) is
-- forgotten: the operator wants this run.
redis.call('HDEL', KEYS[1], 'next_at', 'cancel_requested_at', 'cancel_request', 'canceled_from')
redis.call('LPUSH', KEYS[3], id)
wake(KEYS[4])
return 1
