#!lua flags=allow-oom
-- delete: discard a task that is not running, and release its idempotency key if it still
-- points at this task (so the same work can be enqueued again).
--
-- KEYS[1]  <ns>:{<q>}:t:<id>        task record
-- KEYS[2]  <ns>:{<q>}:<state>       the structure of the state the caller saw
-- KEYS[3]  <ns>:{<q>}:idem:<job>:<key>   optional: the task's idempotency key
-- ARGV[1]  task id
-- ARGV[2]  the state the caller saw (scheduled, pending, retry, dead or completed)
-- Returns  1 when deleted (an id whose record is gone is removed from KEYS[2] too);
--          0 when there was nothing to delete; "active" when it is running (not deleted);
--          "moved" when its state is no longer ARGV[2] (read again and retry); an error naming
--          a key that has another type (nothing changed).
local structure = 'zset'
if ARGV[2] == 'pending' or ARGV[2] == 'active' then
  structure = 'list'
end
local bad = wrong_type(KEYS[1], 'hash', KEYS[2], structure, KEYS[3], 'string')
if bad then
  return bad
end
local id = ARGV[1]
local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  -- No record (or no state in it): drop what is left, so an orphan id can be cleaned up.
  local removed
  if ARGV[2] == 'pending' then
    removed = redis.call('LREM', KEYS[2], 0, id)
  else
    removed = redis.call('ZREM', KEYS[2], id)
  end
  removed = removed + redis.call('DEL', KEYS[1])
  if removed > 0 then
    return 1
  end
  return 0
end
if state == 'active' then
  return 'active'
end
if state ~= ARGV[2] then
  return 'moved'
end
if state == 'pending' then
  redis.call('LREM', KEYS[2], 0, id)
else
  redis.call('ZREM', KEYS[2], id)
end
redis.call('DEL', KEYS[1])
release_key(KEYS[3], id)
return 1
