#!lua
-- ack: the task succeeded; keep it as completed for its retention, or delete it.
--
-- KEYS[1]  <ns>:{<q>}:t:<id>        task record
-- KEYS[2]  <ns>:{<q>}:active        list
-- KEYS[3]  <ns>:{<q>}:lease         sorted set
-- KEYS[4]  <ns>:{<q>}:completed     sorted set, score = expires at
-- KEYS[5]  <ns>:{<q>}:processed:<day>   counter of completed tasks today
-- KEYS[6]  <ns>:{<q>}:guard         never exists, never read: on a Redis Cluster, a node moving
--                                   the slot refuses the call (TRYAGAIN) before it starts
--                                   (keys.QueueKeys.guard)
-- ARGV[1]  task id
-- ARGV[2]  epoch the caller was given by dequeue
-- ARGV[3]  retention in seconds (0: delete the record now)
-- ARGV[4]  lifetime of the day counter in seconds
-- Returns  1 when acked (also when replayed after it applied); 0 when the task is no longer
--          this caller's (stale epoch or not active): nothing changed; an error naming a key
--          of KEYS[1..4] that has another type (nothing changed). A day counter that is not a
--          number is skipped, not an error.
-- A record gone is a replay too: with retention 0 the first call deleted it (an active task's
-- record is never deleted otherwise). A run holding a concurrency slot gives it back (`release`).
-- The fetch's `receipt` is deleted, as by every script that ends a run (give_back reads it only
-- in an active record).
local stale, limited = held(KEYS[1], ARGV[2], 'completed', 1)
if stale ~= true then
  return stale
end
local id = ARGV[1]
local retention = tonumber(ARGV[3])
local now
if retention > 0 then
  -- Filed first, with pcall: a completed key of another type fails here with nothing written,
  -- and a `take` refused after it is undone (the id was not in completed: it was active).
  now = clock()
  local added = redis.pcall('ZADD', KEYS[4], now + retention, id)
  if type(added) == 'table' then
    return wrong_type(KEYS[4], 'zset')
  end
  local bad = take(KEYS[2], KEYS[3], id)
  if bad then
    if added == 1 then
      redis.call('ZREM', KEYS[4], id)
    end
    return bad
  end
  -- The receipt goes first: a record kept has no use for it (give_back reads active ones), and
  -- eight fields fit the hash table a record starts with, where a ninth would double it.
  redis.call('HDEL', KEYS[1], 'receipt')
  redis.call('HSET', KEYS[1], 'state', 'completed', 'completed_at', stamp(now))
else
  local bad = take(KEYS[2], KEYS[3], id)
  if bad then
    return bad
  end
  redis.call('DEL', KEYS[1])
end
count(KEYS[5], ARGV[4])
if limited then
  release(KEYS[1], id, limited)
end
return 1
