#!lua
-- handoff: the first step of an enqueue whose idempotency key lives in another queue's slot
-- than its task: the job type's home queue (its default queue) holds the key, so that the
-- same key is refused on every queue, and one script touches one Cluster slot. In the home's
-- slot, atomically: take the key, and keep the task's enqueue until it is written in its own
-- queue (by the caller at once, else by a worker's recoverer: broker/handoff.py), so that a
-- caller dying between the steps loses nothing. Safe to run twice.
--
-- KEYS[1]  <ns>:{<home>}:idem:<job>:<key>    the idempotency key
-- KEYS[2]  <ns>:{<home>}:handoff             sorted set: id -> when it was handed off
-- KEYS[3]  <ns>:{<home>}:handoff:tasks       hash: id -> its enqueue (JSON) to finish
-- ARGV[1]  task id
-- ARGV[2]  the task's queue
-- ARGV[3]  encoded message (JSON)
-- ARGV[4]  delay in seconds from now (0: now)
-- ARGV[5]  absolute due time in epoch seconds, or "" (wins over the delay)
-- ARGV[6]  idempotency window in milliseconds
-- ARGV[7]  the key in the task's own queue (<ns>:{<q>}:idem:<job>:<key>), which the enqueue
--          of the second step sets: it makes that step safe to run again
-- Returns  {"claimed", ""}       the key is this task's (now, or already: a replay): write the
--                                task in its queue, then `handoff_done`
--          {"duplicate", holder} the key is held by another task: "<id>" (on the home queue)
--                                or "<id> <queue>"; nothing changed
--          an error naming a key that has another type: nothing changed
local mine = ARGV[1] .. ' ' .. ARGV[2]
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' and holder.err then
  return wrong_type(KEYS[1], 'string')
end
if holder == mine then
  return {'claimed', ''}
end
if holder then
  return {'duplicate', holder}
end
local bad = wrong_type(KEYS[2], 'zset', KEYS[3], 'hash')
if bad then
  return bad
end
local now, due_at = due(ARGV[4], ARGV[5])
local eta = ''
if due_at > now then
  eta = stamp(due_at)
end
redis.call('SET', KEYS[1], mine, 'PX', ARGV[6])
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], cjson.encode({queue = ARGV[2], msg = ARGV[3], eta = eta,
  window = ARGV[6], key = ARGV[7]}))
return {'claimed', ''}
