#!lua
-- end_canceled: a run asked to cancel has stopped (its handler saw JobCanceled, or its child
-- was killed after JOBS["CANCEL_GRACE"]): the task is canceled, not retried, not dead, kept for
-- its retention (`shelve`) or deleted with retention 0. A concurrency slot the run holds is
-- given back (`release`).
--
-- KEYS[1]  <ns>:{<q>}:t:<id>        task record
-- KEYS[2]  <ns>:{<q>}:active        list
-- KEYS[3]  <ns>:{<q>}:lease         sorted set
-- KEYS[4]  <ns>:{<q>}:canceled      sorted set, score = expires at
-- KEYS[5]  <ns>:{<q>}:guard         never exists, never read: on a Redis Cluster, a node moving
--                                   the slot refuses the call (TRYAGAIN) before it starts
--                                   (keys.QueueKeys.guard; `release` builds the limit keys)
-- ARGV[1]  task id
-- ARGV[2]  epoch the caller was given by dequeue
-- ARGV[3]  retention in seconds of a task whose message cannot be read
-- ARGV[4]  error (one line: how the run stopped)
-- ARGV[5]  traceback
-- Returns  1 when filed as canceled (also when replayed after it applied: a record gone is a
--          replay with retention 0, as for ack); 0 when the task is no longer this caller's
--          (stale epoch or not active): nothing changed; an error naming a key of KEYS that
--          has another type (nothing changed).
local stale, limited = held(KEYS[1], ARGV[2], 'canceled', 1)
if stale ~= true then
  return stale
end
local id = ARGV[1]
local bad = wrong_type(KEYS[4], 'zset') or take(KEYS[2], KEYS[3], id)
if bad then
  return bad
end
redis.call('HSET', KEYS[1], 'error', ARGV[4], 'traceback', ARGV[5])
shelve(KEYS[1], id, KEYS[4], ARGV[3], clock())
if limited then
  release(KEYS[1], id, limited)  -- the run's concurrency slot, as every end of a run gives back
end
return 1
