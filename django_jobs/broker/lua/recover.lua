#!lua
-- recover: hand back tasks whose lease expired (their worker died or froze).
-- Each is a crash, counted by the rule of `crashed` in _prelude.lua (shared with requeue): dead
-- at the crash budget, else back to pending. The epoch moves on, so a frozen worker that wakes up
-- later cannot write an outcome.
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
local now = clock()
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
    bump(key, 'epoch')
    out[#out + 1] = id
    out[#out + 1] = crashed(key, id, ARGV[2], 'its lease expired', KEYS[3], KEYS[4], KEYS[5])
  end
end
return out
