#!lua
-- fire: a schedule's enqueue. The enqueue script itself (scripts.py composes it in, as a local
-- function), with its idempotency key `schedule:<name>:<fire time>` set in the same call, then
-- the schedule's record: so however many workers fire one fire time, one task is enqueued, and
-- the record names it.
--
-- KEYS[1..5]  enqueue's keys; KEYS[5], the fire's idempotency key, is required
-- KEYS[6]     <ns>:schedule:<name>         hash: last_fire, last_fired_at, last_task_id,
--                                          last_task_queue, paused, and fire_keys (the
--                                          prefix of its fire times' idempotency keys, so
--                                          a removed schedule's can be found and deleted)
-- KEYS[7]     <ns>:schedule:<name>:fires   list of fires (JSON), newest first
-- ARGV[1..5]  enqueue's arguments
-- ARGV[6]     the fire time (epoch seconds), or "" for an operator's "run now"
-- ARGV[7]     the task's queue (for the record)
-- ARGV[8]     how many fires KEYS[7] keeps
-- ARGV[9]     the prefix of the schedule's idempotency keys (<ns>:{<q>}:idem:<job>:schedule:<name>:)
-- Returns     {"late", last_fire}  the schedule's last fire is at or past ARGV[6] (another
--                                  worker fired or skipped it): nothing changed
--             {"paused", ""}       the schedule is paused (a fire time only): nothing changed
--             else enqueue's reply ({"ok", state}, {"exists", state}, {"duplicate", id}, or
--             its error); only "ok" writes the record (last_fire only with a fire time)
local fire = ARGV[6]
local bad = wrong_type(KEYS[6], 'hash', KEYS[7], 'list')
if bad then
  return bad
end
if fire ~= '' then
  local state = redis.call('HMGET', KEYS[6], 'last_fire', 'paused')
  local last = tonumber(state[1] or '')
  if last and last >= tonumber(fire) then
    return {'late', tostring(last)}
  end
  if state[2] == '1' then
    return {'paused', ''}
  end
end
local reply = enqueue({unpack(KEYS, 1, 5)}, {unpack(ARGV, 1, 5)})
if type(reply) == 'table' and reply.err then
  return reply
end
if reply[1] == 'ok' then
  local now = clock()
  redis.call('HSET', KEYS[6], 'last_fired_at', stamp(now), 'last_task_id', ARGV[1],
    'last_task_queue', ARGV[7], 'fire_keys', ARGV[9])
  if fire ~= '' then
    redis.call('HSET', KEYS[6], 'last_fire', fire)
  end
  redis.call('LPUSH', KEYS[7], cjson.encode({fired_at = now, fire_time = fire, task_id = ARGV[1],
    queue = ARGV[7]}))
  redis.call('LTRIM', KEYS[7], 0, tonumber(ARGV[8]) - 1)
end
return reply
