-- dequeue: move up to `count` pending tasks to active, from the queues in priority order, each
-- with a lease and a new epoch. The first queue is drained before the second is looked at.
--
-- This is the one script that spans queues (one round trip whatever their number): its keys are
-- on several Redis Cluster slots. On a Cluster, run one worker per queue (--queues q), which
-- makes it single-slot again.
--
-- KEYS[4i+1..4i+4]  for the i-th queue (from 0), in priority order:
--          <ns>:{<q>}:paused        present while the queue is paused
--          <ns>:{<q>}:pending       list; the oldest task is on the right
--          <ns>:{<q>}:active        list
--          <ns>:{<q>}:lease         sorted set, score = lease deadline
-- ARGV[1]  lease in seconds
-- ARGV[2]  most tasks to move
-- ARGV[3+i]  task key prefix <ns>:{<q>}:t: of the i-th queue
-- Returns  a flat list, 9 strings per task:
--          queue index (from 0), id, msg, attempts, crashes, epoch, enqueued_at,
--          first_unknown_at, lease_deadline
--          (msg is "" when the record is missing or corrupt, and the caller must kill the task
--          with that error rather than drop it).
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local deadline = now + tonumber(ARGV[1])
local left = tonumber(ARGV[2])
local out = {}
for q = 0, #KEYS / 4 - 1 do
  if left == 0 then
    break
  end
  local paused, pending, active, lease = KEYS[4 * q + 1], KEYS[4 * q + 2], KEYS[4 * q + 3],
    KEYS[4 * q + 4]
  if redis.call('EXISTS', paused) == 0 then
    while left > 0 do
      local id = redis.call('LMOVE', pending, active, 'RIGHT', 'LEFT')
      if not id then
        break
      end
      local key = ARGV[3 + q] .. id
      redis.call('ZADD', lease, deadline, id)
      local epoch = redis.pcall('HINCRBY', key, 'epoch', 1)
      if type(epoch) == 'table' then
        -- A record written by hand with a non-numeric epoch: start its epochs over rather
        -- than fail half-way (a script's earlier writes stay when it errors).
        epoch = 1
        redis.call('HSET', key, 'epoch', epoch)
      end
      redis.call('HSET', key, 'state', 'active', 'started_at', tostring(now))
      local f = redis.call('HMGET', key, 'msg', 'attempts', 'crashes', 'enqueued_at',
        'first_unknown_at')
      local n = #out
      out[n + 1] = tostring(q)
      out[n + 2] = id
      out[n + 3] = f[1] or ''
      out[n + 4] = f[2] or '0'
      out[n + 5] = f[3] or '0'
      out[n + 6] = tostring(epoch)
      out[n + 7] = f[4] or ''
      out[n + 8] = f[5] or ''
      out[n + 9] = tostring(deadline)
      left = left - 1
    end
  end
end
return out
