#!lua
-- recover: hand back tasks whose lease expired (their worker died or froze).
-- Each is a crash, counted by the rule of `crashed` in _prelude.lua (shared with requeue): dead
-- at the crash budget, else back to pending. The epoch moves on, so a frozen worker that wakes up
-- later cannot write an outcome. One that held a concurrency slot gives it back (`release`).
--
-- Then the sweep of the queue's limits (see dequeue.lua): for each job type with tasks parked
-- waiting for a concurrency slot (<ns>:{<q>}:limits, job -> its limit, written as dequeue parks
-- one), holders past their lease deadline are pruned and as many parked tasks as there are free
-- slots go back to pending; a job type with none left parked leaves the hash. Releases give
-- slots back at once; the sweep is what gives back a slot no release could (a holder whose run
-- was filed by a worker without limits, in a rolling upgrade), within a recoverer interval.
--
-- KEYS[1]  <ns>:{<q>}:lease         sorted set, score = lease deadline
-- KEYS[2]  <ns>:{<q>}:active        list
-- KEYS[3]  <ns>:{<q>}:pending       list
-- KEYS[4]  <ns>:{<q>}:dead          sorted set
-- KEYS[5]  <ns>:{<q>}:wake          wake-up tokens
-- KEYS[6]  <ns>:{<q>}:guard         never exists, never read: on a Redis Cluster, a node moving
--                                   the slot refuses the call (TRYAGAIN) before it starts
--                                   (keys.QueueKeys.guard)
-- ARGV[1]  task key prefix <ns>:{<q>}:t:
-- ARGV[2]  crashes after which the task is dead
-- ARGV[3]  most tasks to recover in this call
-- ARGV[4]  retention in seconds of a task whose message cannot be read (for `unwanted`)
-- A task an operator asked to cancel while it ran is canceled instead (`unwanted`): "canceled".
-- Returns  a flat list: id, "pending", "dead" or "canceled", id, ...; an error naming a key of KEYS[1..4]
--          that has another type (nothing changed). A task whose record is not a hash is filed
--          as dead (see `bury`); one whose record is gone goes back to pending, to be filed as
--          dead by the worker that takes it; a wake key or limit key of another type is skipped.
local now = clock()
local out = {}
local ids, bad = range(KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, ARGV[3])
if not ids then
  return bad
end
-- An id in active without a lease (the lease set evicted by Redis, or edited by hand) would
-- never be recovered: it counts as expired. Every script that moves an id to active writes its
-- lease in the same call, so no run in progress is taken for one. Looked for among the oldest
-- runs, at the tail of active (dequeue puts each new one at its head): with more running than
-- a call looks at, an old one is found all the same.
local running = redis.pcall('LRANGE', KEYS[2], -tonumber(ARGV[3]), -1)
if not running.err and #running > 0 then
  local leased = redis.call('ZMSCORE', KEYS[1], unpack(running))
  for i, id in ipairs(running) do
    if not leased[i] then
      ids[#ids + 1] = id
    end
  end
end
if #ids > 0 then
  bad = wrong_type(KEYS[2], 'list', KEYS[3], 'list', KEYS[4], 'zset',
    string.sub(ARGV[1], 1, -3) .. 'canceled', 'zset')
  if bad then
    return bad
  end
end
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('LREM', KEYS[2], 1, id)
  local key = ARGV[1] .. id
  local kind = redis.call('TYPE', key).ok
  if kind == 'none' then
    -- Its record was evicted (or deleted by hand): back to pending, where the worker that
    -- takes it files it as dead saying so, rather than lost without a word.
    redis.call('RPUSH', KEYS[3], id)
    wake(KEYS[5])
    out[#out + 1] = id
    out[#out + 1] = 'pending'
  elseif kind ~= 'hash' then
    bury(key, kind, id, KEYS[4], now)
    out[#out + 1] = id
    out[#out + 1] = 'dead'
  else
    -- bump: a record written by hand with non-numeric fields must not stop the sweep
    -- half-way, with the task already out of lease and active.
    bump(key, 'epoch')
    redis.call('HDEL', key, 'receipt')  -- the fetch's receipt ends with the run
    local f = redis.call('HMGET', key, 'limited', 'cancel_requested_at')
    if f[1] then
      release(key, id, f[1])
    end
    out[#out + 1] = id
    if f[2] then
      out[#out + 1] = unwanted(key, id, ARGV[4])
    else
      out[#out + 1] = crashed(key, id, ARGV[2], 'its lease expired', KEYS[3], KEYS[4], KEYS[5])
    end
  end
end
local prefix = string.sub(ARGV[1], 1, -3)
local limits = redis.pcall('HGETALL', prefix .. 'limits')
if limits.err then
  return out
end
for i = 1, #limits, 2 do
  local job = limits[i]
  local running = prefix .. 'running:' .. job
  if type(redis.pcall('ZREMRANGEBYSCORE', running, '-inf', now)) == 'number' then
    local free = (tonumber(limits[i + 1]) or 1) - redis.call('ZCARD', running)
    if free > 0 then
      unpark(prefix, job, free)
    end
  end
  if redis.pcall('LLEN', prefix .. 'parked:' .. job) == 0 then
    redis.call('HDEL', prefix .. 'limits', job)
  end
end
return out
