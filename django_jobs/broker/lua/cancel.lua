#!lua
-- cancel: an operator (django_jobs.cancel, the admin, the API, the CLI) cancels a task.
-- A task waiting to run (pending, scheduled, retry) leaves its structure and is canceled now
-- (`shelve`: kept for its retention). A running one (active) is marked `cancel_requested_at`:
-- the heartbeat of whichever worker runs it reads the mark (extend_lease) and interrupts the
-- run with JobCanceled, which ends canceled (end_canceled). Neither changes the epoch: a run
-- still out there under it finds the task no longer active (or its lease lost) and writes
-- nothing. The idempotency key stays, as with every other end (delete releases it).
--
-- KEYS[1]  <ns>:{<q>}:t:<id>        task record
-- KEYS[2]  <ns>:{<q>}:pending       list
-- KEYS[3]  <ns>:{<q>}:scheduled     sorted set
-- KEYS[4]  <ns>:{<q>}:retry         sorted set
-- KEYS[5]  <ns>:{<q>}:canceled      sorted set, score = expires at
-- KEYS[6]  <ns>:{<q>}:cancel:<token> string: the state this call took the task from, kept 10
--                                   minutes when a retention of 0 deleted the record (a replay
--                                   finds no record: it answers from this)
-- ARGV[1]  task id
-- ARGV[2]  retention in seconds of a task whose message cannot be read
-- ARGV[3]  this request's token (any unique string): a replay of the same call answers as the
--          call did
-- Returns  {what, state}: {'canceled', the state it left} when it was waiting (also when this
--          call is replayed after it applied); {'requested', 'active'} when it runs (asked to
--          stop; also when asked before); {'finished', its state} when it had ended
--          (completed, dead, canceled: nothing changed); {'gone', ''} when there is no such
--          record (or it has no state); an error naming a key of KEYS that has another type
--          (nothing changed).
local bad = wrong_type(KEYS[1], 'hash', KEYS[2], 'list', KEYS[3], 'zset', KEYS[4], 'zset',
  KEYS[5], 'zset', KEYS[6], 'string')
if bad then
  return bad
end
local id = ARGV[1]
local f = redis.call('HMGET', KEYS[1], 'state', 'cancel_request', 'canceled_from')
local state = f[1]
if not state then
  local was = redis.call('GET', KEYS[6])
  if was then
    return {'canceled', was}  -- a replay of this very call, whose retention of 0 deleted it
  end
  return {'gone', ''}
end
if state == 'canceled' and f[2] == ARGV[3] and f[3] then
  return {'canceled', f[3]}  -- a replay of this very call
end
if state == 'active' then
  if redis.call('HSETNX', KEYS[1], 'cancel_requested_at', stamp(clock())) == 1 then
    redis.call('HSET', KEYS[1], 'cancel_request', ARGV[3])
  end
  return {'requested', 'active'}
end
if state == 'pending' then
  redis.call('LREM', KEYS[2], 0, id)
elseif state == 'scheduled' then
  redis.call('ZREM', KEYS[3], id)
elseif state == 'retry' then
  redis.call('ZREM', KEYS[4], id)
else
  return {'finished', state}
end
local now = clock()
redis.call('HSET', KEYS[1], 'cancel_requested_at', stamp(now), 'cancel_request', ARGV[3],
  'canceled_from', state)
shelve(KEYS[1], id, KEYS[5], ARGV[2], now)
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SET', KEYS[6], state, 'PX', 600000)
end
return {'canceled', state}
