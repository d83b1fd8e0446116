#!lua
-- requeue: put an active task back in pending at once, without spending an attempt.
-- Used on graceful shutdown (not a crash) and when the supervisor sees a child die under its
-- task (a crash: the rule of `crashed` in _prelude.lua, shared with recover).
--
-- KEYS[1]  <ns>:{<q>}:t:<id>        task record
-- KEYS[2]  <ns>:{<q>}:active        list
-- KEYS[3]  <ns>:{<q>}:lease         sorted set
-- KEYS[4]  <ns>:{<q>}:pending       list
-- KEYS[5]  <ns>:{<q>}:dead          sorted set
-- KEYS[6]  <ns>:{<q>}:wake          wake-up tokens
-- KEYS[7]  <ns>:{<q>}:guard         never exists, never read: on a Redis Cluster, a node moving
--                                   the slot refuses the call (TRYAGAIN) before it starts
--                                   (keys.QueueKeys.guard)
-- ARGV[1]  task id
-- ARGV[2]  epoch the caller was given by dequeue
-- ARGV[3]  "1": count a crash; "0": a clean hand-back
-- ARGV[4]  crashes after which the task is dead
-- ARGV[5]  the reason, kept as the error when the task goes dead
-- ARGV[6]  retention in seconds of a task whose message cannot be read (for `unwanted`)
-- Returns  "pending" or "dead", or "canceled" for a run an operator asked to cancel (it is not
--          run again: `unwanted`); 0 when the task is no longer this caller's: nothing changed; an
--          error naming a key of KEYS[1..5] that has another type (nothing changed). A run
--          holding a concurrency slot gives it back (`release`), and a clean hand-back the
--          start it was counted in its rate_limit.
local id = ARGV[1]
local bad, limited, marked = claim(KEYS[1], ARGV[2], false, KEYS[2], KEYS[3], id,
  KEYS[4], 'list', KEYS[5], 'zset')
if bad then
  return bad
end
bump(KEYS[1], 'epoch')
redis.call('HDEL', KEYS[1], 'receipt')  -- the fetch's receipt ends with the run
-- A clean hand-back (the run did not go on: a strict-priority fetch handing back what it took
-- out of order, a worker stopping) gives back the start its dequeue counted against its job
-- type's rate_limit (`unrate`).
unrate(KEYS[1], id, redis.call('HGET', KEYS[1], 'rated'), ARGV[3] ~= '1')
if limited then
  release(KEYS[1], id, limited)
end
if marked then
  return unwanted(KEYS[1], id, ARGV[6])
end
if ARGV[3] == '1' then
  return crashed(KEYS[1], id, ARGV[4], ARGV[5], KEYS[4], KEYS[5], KEYS[6])
end
return back(KEYS[1], id, KEYS[4], KEYS[6])
