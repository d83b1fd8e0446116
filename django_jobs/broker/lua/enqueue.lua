#!lua
-- enqueue: write a new task and put it in pending (due now) or scheduled (due later).
--
-- KEYS[1]  <ns>:{<q>}:t:<id>        task record (hash)
-- KEYS[2]  <ns>:{<q>}:pending       list, newest on the left
-- KEYS[3]  <ns>:{<q>}:scheduled     sorted set, score = due time
-- KEYS[4]  <ns>:{<q>}:wake          wake-up tokens for idle workers
-- KEYS[5]  <ns>:{<q>}:idem:<job>:<key>   optional: the idempotency key
-- ARGV[1]  task id
-- ARGV[2]  encoded message (JSON)
-- ARGV[3]  delay in seconds from now (0: now)
-- ARGV[4]  absolute due time in epoch seconds, or "" (wins over the delay)
-- ARGV[5]  idempotency window in milliseconds (used only with KEYS[5])
-- Returns  {"ok", state}          accepted; state is "pending" or "scheduled"
--          {"exists", state}      this id was already enqueued (a replayed call): nothing changed
--          {"duplicate", id}      the idempotency key is held by the task `id`: nothing changed
--          an error naming a key of KEYS[1..3] or KEYS[5] that has another type: nothing changed
-- A wake key (KEYS[4]) of another type is skipped: the task is enqueued without its token.
local id = ARGV[1]
if KEYS[5] then
  local holder = redis.pcall('GET', KEYS[5])
  if type(holder) == 'table' and holder.err then
    return wrong_type(KEYS[5], 'string')
  end
  if holder and holder ~= id then
    return {'duplicate', holder}
  end
  if holder then
    -- Our own key: this call is a replay of one already applied.
    return {'exists', redis.call('HGET', KEYS[1], 'state') or 'gone'}
  end
end
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'hash' then
  return {'exists', redis.call('HGET', KEYS[1], 'state') or ''}
elseif kind ~= 'none' then
  return wrong_type(KEYS[1], 'hash')
end

local now, due_at = due(ARGV[3], ARGV[4])

-- The first write puts the id in the structure this task goes to (the other one is not written,
-- so not checked): one of another type refuses it there, before anything was written.
local state, key, expected, added = 'pending', KEYS[2], 'list', nil
if due_at > now then
  state, key, expected = 'scheduled', KEYS[3], 'zset'
  added = redis.pcall('ZADD', key, due_at, id)
else
  added = redis.pcall('LPUSH', key, id)
end
if type(added) == 'table' and added.err then
  return wrong_type(key, expected) or added
end
-- No attempts, crashes or epoch yet: a counter absent reads as 0 (dequeue, bump, the read side),
-- and each field of a record stored as a hash table costs some 56 bytes.
if state == 'scheduled' then
  redis.call('HSET', KEYS[1], 'msg', ARGV[2], 'state', state, 'enqueued_at', stamp(now),
    'next_at', stamp(due_at))
else
  wake(KEYS[4])
  redis.call('HSET', KEYS[1], 'msg', ARGV[2], 'state', state, 'enqueued_at', stamp(now))
end
if KEYS[5] then
  redis.call('SET', KEYS[5], id, 'PX', ARGV[5])
end
return {'ok', state}
