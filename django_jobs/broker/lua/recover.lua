#!lua
-- recover: hand back tasks whose lease expired (their worker died or froze).
-- A crash is not a failure: no attempt is spent, but the crash is counted, and a task that
-- crashed its worker too often goes dead so that it cannot loop forever. The epoch moves on, so
-- a frozen worker that wakes up later cannot write an outcome.
--
-- KEYS[1]  <ns>:{<q>}:lease         sorted set, score = lease deadline
-- KEYS[2]  <ns>:{<q>}:active        list
-- KEYS[3]  <ns>:{<q>}:pending       list
-- KEYS[4]  <ns>:{<q>}:dead          sorted set
-- KEYS[5]  <ns>:{<q>}:wake          wake-up tokens
-- ARGV[1]  task key prefix <ns>:{<q>}:t:
-- ARGV[2]  crashes after which the task is dead
-- ARGV[3]  most tasks to recover in this call
-- Returns  a flat list: id, "pending" or "dead", id, ...; an error naming a key of KEYS[1..4]
--          that has another type (nothing changed). A task whose record is not a hash is filed
--          as dead (see `bury`); a wake key of another type is skipped.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local out = {}
local ids, bad = range(KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, ARGV[3])
if not ids then
  return bad
end
if #ids == 0 then
  return out  -- the common case of a tick: nothing more to look at
end
bad = wrong_type(KEYS[2], 'list', KEYS[3], 'list', KEYS[4], 'zset')
if bad then
  return bad
end
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('LREM', KEYS[2], 1, id)
  local key = ARGV[1] .. id
  local kind = redis.call('TYPE', key).ok
  if kind ~= 'hash' and kind ~= 'none' then
    bury(key, kind, id, KEYS[4], now)
    out[#out + 1] = id
    out[#out + 1] = 'dead'
  elseif kind == 'hash' then
    -- bump: a record written by hand with non-numeric fields must not stop the sweep
    -- half-way, with the task already out of lease and active.
    local crashes = bump(key, 'crashes')
    bump(key, 'epoch')
    if crashes >= tonumber(ARGV[2]) then
      redis.call('HSET', key, 'state', 'dead', 'died_at', tostring(now), 'failed_at', tostring(now),
        'error', 'crashed its worker ' .. crashes .. ' times (its lease expired each time)',
        'traceback', '')
      redis.call('ZADD', KEYS[4], now, id)
      out[#out + 1] = id
      out[#out + 1] = 'dead'
    else
      redis.call('HSET', key, 'state', 'pending')
      -- Back at the head of the line: it has waited longest.
      redis.call('RPUSH', KEYS[3], id)
      wake(KEYS[5])
      out[#out + 1] = id
      out[#out + 1] = 'pending'
    end
  end
end
return out
