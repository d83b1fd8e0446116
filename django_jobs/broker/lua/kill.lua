#!lua
-- kill: the task will not be run again; keep it in the dead set with its last error.
-- The janitor bounds the dead set (count and age); this script does not trim.
--
-- KEYS[1]  <ns>:{<q>}:t:<id>        task record
-- KEYS[2]  <ns>:{<q>}:active        list
-- KEYS[3]  <ns>:{<q>}:lease         sorted set
-- KEYS[4]  <ns>:{<q>}:dead          sorted set, score = died at
-- KEYS[5]  <ns>:{<q>}:failed:<day>  counter of failed runs today
-- KEYS[6]  <ns>:{<q>}:guard         never exists, never read: on a Redis Cluster, a node moving
--                                   the slot refuses the call (TRYAGAIN) before it starts
--                                   (keys.QueueKeys.guard)
-- ARGV[1]  task id
-- ARGV[2]  epoch the caller was given by dequeue
-- ARGV[3]  error (one line)
-- ARGV[4]  traceback
-- ARGV[5]  "1": the run counts as a spent attempt; "0": it does not (undecodable, unknown type)
-- ARGV[6]  lifetime of the day counter in seconds
-- Returns  1 when moved to dead (also when replayed after it applied); 0 when the task is no
--          longer this caller's: nothing changed; an error naming a key of KEYS[1..4] that has
--          another type (nothing changed). A run holding a concurrency slot gives it back
--          (`release`).
local id = ARGV[1]
local bad, limited = claim(KEYS[1], ARGV[2], 'dead', KEYS[2], KEYS[3], id, KEYS[4], 'zset')
if bad then
  return bad
end
local now = clock()
if ARGV[5] == '1' then
  bump(KEYS[1], 'attempts')
end
count(KEYS[5], ARGV[6])
redis.call('HDEL', KEYS[1], 'next_at', 'receipt')  -- the fetch's receipt ends with the run
redis.call('HSET', KEYS[1], 'state', 'dead', 'error', ARGV[3], 'traceback', ARGV[4],
  'failed_at', stamp(now), 'died_at', stamp(now))
redis.call('ZADD', KEYS[4], now, id)
if limited then
  release(KEYS[1], id, limited)
end
return 1
