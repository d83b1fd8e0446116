#!lua
-- forward: move scheduled and retry tasks whose time has come to pending.
--
-- KEYS[1]  <ns>:{<q>}:scheduled     sorted set, score = due time
-- KEYS[2]  <ns>:{<q>}:retry         sorted set, score = next attempt
-- KEYS[3]  <ns>:{<q>}:pending       list
-- KEYS[4]  <ns>:{<q>}:wake          wake-up tokens
-- KEYS[5]  <ns>:{<q>}:guard         never exists, never read: on a Redis Cluster, a node moving
--                                   the slot refuses the call (TRYAGAIN) before it starts
--                                   (keys.QueueKeys.guard)
-- ARGV[1]  task key prefix <ns>:{<q>}:t:
-- ARGV[2]  most tasks to move from each sorted set in this call
-- Returns  the number of tasks moved, up to the limit from each sorted set: call again while
--          it is at least the limit, as the forwarder does, since either set may hold more that
--          are due; an error naming a key of KEYS[1..3] that has another type
--          (nothing changed). A wake key of another type is skipped.
local now = clock()
local due = {}
for i = 1, 2 do
  local ids, bad = range(KEYS[i], '-inf', now, 'BYSCORE', 'LIMIT', 0, ARGV[2])
  if not ids then
    return bad
  end
  due[i] = ids
end
if #due[1] + #due[2] == 0 then
  return 0  -- the common case of a tick: nothing more to look at
end
local bad = wrong_type(KEYS[3], 'list')
if bad then
  return bad
end
local moved = 0
for i = 1, 2 do
  for _, id in ipairs(due[i]) do
    redis.call('ZREM', KEYS[i], id)
    local key = ARGV[1] .. id
    -- An id without a record (evicted, or deleted by hand) goes on too: the worker that
    -- takes it files it as dead saying so, rather than it vanishing without a word; so does
    -- one whose record is not a hash (overwritten by hand), which dequeue files as dead.
    redis.call('LPUSH', KEYS[3], id)
    if redis.call('TYPE', key).ok == 'hash' then
      redis.call('HSET', key, 'state', 'pending')
      redis.call('HDEL', key, 'next_at')
    end
    moved = moved + 1
  end
end
if moved > 0 then
  wake(KEYS[4])
end
return moved
