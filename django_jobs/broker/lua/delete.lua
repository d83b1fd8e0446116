-- delete: discard a task that is not running, and release its idempotency key if it still
-- points at this task (so the same work can be enqueued again).
--
-- KEYS[1]  <ns>:{<q>}:t:<id>        task record
-- KEYS[2]  <ns>:{<q>}:<state>       the structure of the state the caller saw
-- KEYS[3]  <ns>:{<q>}:idem:<job>:<key>   optional: the task's idempotency key
-- ARGV[1]  task id
-- ARGV[2]  the state the caller saw (scheduled, pending, retry, dead or completed)
-- Returns  1 when deleted; 0 when the task is gone; "active" when it is running (not deleted);
--          "moved" when its state is no longer ARGV[2] (read again and retry).
local id = ARGV[1]
local state = redis.call('HGET', KEYS[1], 'state')
if not state then
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
if KEYS[3] and redis.call('GET', KEYS[3]) == id then
  redis.call('DEL', KEYS[3])
end
return 1
