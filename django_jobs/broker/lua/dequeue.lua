#!lua
-- dequeue: move up to `count` pending tasks to active, from the queues in priority order, each
-- with a lease and a new epoch. The first queue is drained before the second is looked at.
--
-- This is the one script that spans queues (one round trip whatever their number): its keys are
-- on several Redis Cluster slots. On a Cluster, run one worker per queue (--queues q), which
-- makes it single-slot again.
--
-- KEYS[5i+1..5i+5]  for the i-th queue (from 0), in priority order:
--          <ns>:{<q>}:paused        present while the queue is paused
--          <ns>:{<q>}:pending       list; the oldest task is on the right
--          <ns>:{<q>}:active        list
--          <ns>:{<q>}:lease         sorted set, score = lease deadline
--          <ns>:{<q>}:dead          sorted set, for a task whose record is not a hash
-- ARGV[1]  lease in seconds
-- ARGV[2]  most tasks to move
-- ARGV[3+i]  task key prefix <ns>:{<q>}:t: of the i-th queue
-- Returns  a flat list, 9 strings per task:
--          queue index (from 0), id, msg, attempts, crashes, epoch, enqueued_at,
--          first_unknown_at, lease_deadline
--          (msg is "" when the record is missing or corrupt, and the caller must kill the task
--          with that error rather than drop it),
--          then, only when a key had another type than ours, one more element: a list of
--          "<its type> <our type> <key>". A queue whose pending, active or lease key has another
--          type is skipped (its tasks stay where they are; the next queues are served); a task
--          whose record is not a hash is filed as dead (see `bury`) and not handed out.
local now = clock()
local deadline = now + tonumber(ARGV[1])
local left = tonumber(ARGV[2])
local out = {}
local broken = {}
local function broke(key, want)
  broken[#broken + 1] = redis.call('TYPE', key).ok .. ' ' .. want .. ' ' .. key
end
for q = 0, #KEYS / 5 - 1 do
  if left == 0 then
    break
  end
  local paused, pending, active, lease, dead = KEYS[5 * q + 1], KEYS[5 * q + 2],
    KEYS[5 * q + 3], KEYS[5 * q + 4], KEYS[5 * q + 5]
  if redis.call('EXISTS', paused) == 0 then
    while left > 0 do
      -- pcall, and undone when the lease cannot be written, so that keys of another type
      -- leave the queue as it was: checking first would cost the hot path a call per key.
      local id = redis.pcall('LMOVE', pending, active, 'RIGHT', 'LEFT')
      if type(id) == 'table' then
        for _, pair in ipairs({{pending, 'list'}, {active, 'list'}}) do
          local kind = redis.call('TYPE', pair[1]).ok
          if kind ~= 'none' and kind ~= pair[2] then
            broke(pair[1], pair[2])
          end
        end
        break
      end
      if not id then
        break
      end
      if type(redis.pcall('ZADD', lease, deadline, id)) == 'table' then
        redis.call('LMOVE', active, pending, 'LEFT', 'RIGHT')
        broke(lease, 'zset')
        break
      end
      local key = ARGV[3 + q] .. id
      local epoch = redis.pcall('HINCRBY', key, 'epoch', 1)
      local kind = 'hash'
      if type(epoch) == 'table' then
        kind = redis.call('TYPE', key).ok
        -- A record written by hand with a non-numeric epoch: start its epochs over.
        epoch = 1
      end
      if kind ~= 'hash' then
        redis.call('ZREM', lease, id)
        redis.call('LREM', active, 1, id)
        broken[#broken + 1] = kind .. ' hash ' .. key
        bury(key, kind, id, dead, now)
      else
        redis.call('HSET', key, 'epoch', epoch, 'state', 'active', 'started_at', stamp(now))
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
end
if #broken > 0 then
  out[#out + 1] = broken
end
return out
