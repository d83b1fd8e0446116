-- dequeue: move the oldest pending task to active, with a lease and a new epoch.
--
-- KEYS[1]  <ns>:{<q>}:paused        present while the queue is paused
-- KEYS[2]  <ns>:{<q>}:pending       list; the oldest task is on the right
-- KEYS[3]  <ns>:{<q>}:active        list
-- KEYS[4]  <ns>:{<q>}:lease         sorted set, score = lease deadline
-- ARGV[1]  task key prefix <ns>:{<q>}:t:
-- ARGV[2]  lease in seconds
-- Returns  false when the queue is paused or empty, else
--          {id, msg, attempts, crashes, epoch, enqueued_at, first_unknown_at, lease_deadline}
--          (all strings; msg is "" when the record is missing or corrupt, and the caller must
--          kill the task with that error rather than drop it).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return false
end
local id = redis.call('LMOVE', KEYS[2], KEYS[3], 'RIGHT', 'LEFT')
if not id then
  return false
end
local key = ARGV[1] .. id
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local deadline = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[4], deadline, id)
local epoch = redis.call('HINCRBY', key, 'epoch', 1)
redis.call('HSET', key, 'state', 'active', 'started_at', tostring(now))
local f = redis.call('HMGET', key, 'msg', 'attempts', 'crashes', 'enqueued_at', 'first_unknown_at')
return {id, f[1] or '', f[2] or '0', f[3] or '0', tostring(epoch), f[4] or '', f[5] or '',
  tostring(deadline)}
