-- forward: move scheduled and retry tasks whose time has come to pending.
--
-- KEYS[1]  <ns>:{<q>}:scheduled     sorted set, score = due time
-- KEYS[2]  <ns>:{<q>}:retry         sorted set, score = next attempt
-- KEYS[3]  <ns>:{<q>}:pending       list
-- KEYS[4]  <ns>:{<q>}:wake          wake-up tokens
-- ARGV[1]  task key prefix <ns>:{<q>}:t:
-- ARGV[2]  most tasks to move from each sorted set in this call
-- Returns  the number of tasks moved (call again while it equals twice the limit).
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local moved = 0
for i = 1, 2 do
  local ids = redis.call('ZRANGE', KEYS[i], '-inf', now, 'BYSCORE', 'LIMIT', 0, ARGV[2])
  for _, id in ipairs(ids) do
    redis.call('ZREM', KEYS[i], id)
    local key = ARGV[1] .. id
    -- An id without a record has nothing left to run: dropping it loses nothing.
    if redis.call('EXISTS', key) == 1 then
      redis.call('LPUSH', KEYS[3], id)
      redis.call('HSET', key, 'state', 'pending')
      redis.call('HDEL', key, 'next_at')
      moved = moved + 1
    end
  end
end
if moved > 0 then
  if redis.call('LPUSH', KEYS[4], '1') > 64 then
    redis.call('LTRIM', KEYS[4], 0, 63)  -- a token per idle worker is plenty
  end
end
return moved
