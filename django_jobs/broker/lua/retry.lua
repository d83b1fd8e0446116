#!lua
-- retry: the run failed (or its job type is unknown here); run it again after a delay.
--
-- KEYS[1]  <ns>:{<q>}:t:<id>        task record
-- KEYS[2]  <ns>:{<q>}:active        list
-- KEYS[3]  <ns>:{<q>}:lease         sorted set
-- KEYS[4]  <ns>:{<q>}:retry         sorted set, score = next attempt
-- KEYS[5]  <ns>:{<q>}:failed:<day>  counter of failed runs today
-- KEYS[6]  <ns>:{<q>}:guard         never exists, never read: on a Redis Cluster, a node moving
--                                   the slot refuses the call (TRYAGAIN) before it starts
--                                   (keys.QueueKeys.guard)
-- ARGV[1]  task id
-- ARGV[2]  epoch the caller was given by dequeue
-- ARGV[3]  delay in seconds before the next attempt
-- ARGV[4]  error (one line)
-- ARGV[5]  traceback
-- ARGV[6]  "1": the run counts as a spent attempt and a failure; "0": it does not (a bounce)
-- ARGV[7]  lifetime of the day counter in seconds
-- ARGV[8]  "1": the job type is unknown here (keep when that was first seen); "0": it is known
-- ARGV[9]  retention in seconds of a task whose message cannot be read (for `unwanted`)
-- Returns  1 when moved to retry (also when replayed after it applied); 0 when the task is no
--          longer this caller's: nothing changed; an error naming a key of KEYS[1..4] that has
--          another type (nothing changed). A run holding a concurrency slot gives it back
--          (`release`). A run an operator asked to cancel is canceled instead, with this
--          failure as its error (`unwanted`): it does not run again (also 1).
local id = ARGV[1]
local bad, limited, marked = claim(KEYS[1], ARGV[2], 'retry', KEYS[2], KEYS[3], id, KEYS[4], 'zset')
if bad then
  return bad
end
if marked then
  redis.call('HSET', KEYS[1], 'error', ARGV[4], 'traceback', ARGV[5])
  unwanted(KEYS[1], id, ARGV[9])
  if limited then
    release(KEYS[1], id, limited)
  end
  return 1
end
local now = clock()
local due = now + tonumber(ARGV[3])
if ARGV[6] == '1' then
  bump(KEYS[1], 'attempts')
  count(KEYS[5], ARGV[7])
end
-- The fetch's receipt ends with the run (give_back reads it only in an active record).
if ARGV[8] == '1' then
  redis.call('HDEL', KEYS[1], 'receipt')
  redis.call('HSETNX', KEYS[1], 'first_unknown_at', stamp(now))
else
  redis.call('HDEL', KEYS[1], 'first_unknown_at', 'receipt')
end
redis.call('HSET', KEYS[1], 'state', 'retry', 'error', ARGV[4], 'traceback', ARGV[5],
  'failed_at', stamp(now), 'next_at', stamp(due))
redis.call('ZADD', KEYS[4], due, id)
if limited then
  release(KEYS[1], id, limited)
end
return 1
