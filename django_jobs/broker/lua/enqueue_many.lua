#!lua
-- enqueue_many: write a batch of new tasks of one queue, all due at the same time, in one call.
-- The bulk form of enqueue (no idempotency keys): cheaper per task than one script call each.
--
-- KEYS[1]  <ns>:{<q>}:pending       list, newest on the left
-- KEYS[2]  <ns>:{<q>}:scheduled     sorted set, score = due time
-- KEYS[3]  <ns>:{<q>}:wake          wake-up tokens for idle workers
-- KEYS[4..]  <ns>:{<q>}:t:<id>      the task records, in the order of the ids below
-- ARGV[1]  delay in seconds from now (0: now)
-- ARGV[2]  absolute due time in epoch seconds, or "" (wins over the delay)
-- ARGV[3], ARGV[4], ...  pairs of task id and encoded message
-- Returns  {state, written}: "pending" or "scheduled", and how many tasks were new (a replayed
--          call finds its tasks written and writes nothing again); an error naming a record
--          key, or the one of KEYS[1..2] the tasks go to, that has another type (nothing
--          changed). A wake key of another type is skipped: the tasks are enqueued without
--          their tokens.
-- Every record is looked at before the first write, so a bad one changes nothing.
local new = {}
for i = 4, #KEYS do
  local kind = redis.call('TYPE', KEYS[i]).ok
  if kind == 'none' then
    new[#new + 1] = i
  elseif kind ~= 'hash' then
    return wrong_type(KEYS[i], 'hash')
  end
end
local now, due_at = due(ARGV[1], ARGV[2])
local state, key, expected = 'pending', KEYS[1], 'list'
if due_at > now then
  state, key, expected = 'scheduled', KEYS[2], 'zset'
end
-- The first write puts the new ids in the structure the tasks go to, in one command per 1,000
-- (the other structure is not written, so not checked): one of another type refuses them
-- there, before anything was written.
for first = 1, #new, 1000 do
  local args = {}
  for n = first, math.min(first + 999, #new) do
    if state == 'scheduled' then
      args[#args + 1] = due_at
    end
    args[#args + 1] = ARGV[2 * (new[n] - 4) + 3]
  end
  local added = redis.pcall(state == 'scheduled' and 'ZADD' or 'LPUSH', key, unpack(args))
  if type(added) == 'table' and added.err then
    return wrong_type(key, expected) or added
  end
end
local enqueued_at, next_at = stamp(now), stamp(due_at)
for _, i in ipairs(new) do
  -- No counters yet, as enqueue: absent reads as 0.
  if state == 'scheduled' then
    redis.call('HSET', KEYS[i], 'msg', ARGV[2 * (i - 4) + 4], 'state', state, 'enqueued_at',
      enqueued_at, 'next_at', next_at)
  else
    redis.call('HSET', KEYS[i], 'msg', ARGV[2 * (i - 4) + 4], 'state', state, 'enqueued_at',
      enqueued_at)
  end
end
if state == 'pending' and #new > 0 then
  wake(KEYS[3], #new)
end
return {state, #new}
