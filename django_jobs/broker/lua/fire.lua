#!lua
-- fire: record a schedule's fire in its hash, once its task was enqueued (broker/schedules.py:
-- the enqueue, with the fire time's idempotency key, is its own script, on its queue's slot;
-- this one is on the schedule's). However many workers fire one fire time, one task is
-- enqueued (the key), and the last fire time only moves forward.
--
-- KEYS[1]  <ns>:schedule:<name>         hash: last_fire, last_fired_at, last_task_id,
--                                       last_task_queue, paused, and fire_keys (the prefix of
--                                       its fire times' idempotency keys, so that a removed
--                                       schedule's can be found and deleted)
-- ARGV[1]  the fire time (epoch seconds), or "" for an operator's "run now"
-- ARGV[2]  the task enqueued, or "" when the fire time's key held a task already (another
--          worker's, or this one's before it failed to record it): then only last_fire moves
-- ARGV[3]  the task's queue
-- ARGV[4]  the prefix of the schedule's idempotency keys (<ns>:{<q>}:idem:<job>:schedule:<name>:)
-- Returns  the time of the fire (Redis TIME, epoch seconds) as a string, for its history entry;
--          an error if KEYS[1] is not a hash (nothing changed)
local bad = wrong_type(KEYS[1], 'hash')
if bad then
  return bad
end
local now = clock()
local fire = ARGV[1]
if fire ~= '' then
  local last = tonumber(redis.call('HGET', KEYS[1], 'last_fire') or '')
  if not last or last < tonumber(fire) then
    redis.call('HSET', KEYS[1], 'last_fire', fire)
  end
end
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'last_fired_at', stamp(now), 'last_task_id', ARGV[2],
    'last_task_queue', ARGV[3], 'fire_keys', ARGV[4])
end
return stamp(now)
