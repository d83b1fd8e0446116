#!lua flags=allow-oom
-- janitor: delete completed and canceled tasks past their retention, and bound the dead set by
-- age and size.
--
-- KEYS[1]  <ns>:{<q>}:completed     sorted set, score = expires at
-- KEYS[2]  <ns>:{<q>}:dead          sorted set, score = died at
-- KEYS[3]  <ns>:{<q>}:canceled      sorted set, score = expires at
-- KEYS[4]  <ns>:{<q>}:guard         never exists, never read: on a Redis Cluster, a node moving
--                                   the slot refuses the call (TRYAGAIN) before it starts
--                                   (keys.QueueKeys.guard)
-- ARGV[1]  task key prefix <ns>:{<q>}:t:
-- ARGV[2]  dead tasks to keep at most (the newest)
-- ARGV[3]  age in seconds past which a dead task is deleted
-- ARGV[4]  most tasks to delete from each set in this call
-- Returns  the number of tasks deleted (call again while it is not below the limit); an error
--          naming a key of KEYS that has another type (nothing changed).
local now = clock()
local limit = tonumber(ARGV[4])
local function purge(set, ids)
  for _, id in ipairs(ids) do
    redis.call('DEL', ARGV[1] .. id)
    redis.call('ZREM', set, id)
  end
  return #ids
end
-- Every set is read before the first delete, so a key of another type changes nothing.
local expired, bad = range(KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
if not expired then
  return bad
end
local old
old, bad = range(KEYS[2], '-inf', now - tonumber(ARGV[3]), 'BYSCORE', 'LIMIT', 0, limit)
if not old then
  return bad
end
local shelved
shelved, bad = range(KEYS[3], '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
if not shelved then
  return bad
end
local deleted = purge(KEYS[1], expired) + purge(KEYS[3], shelved)
deleted = deleted + purge(KEYS[2], old)
local excess = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[2])
if excess > 0 then
  deleted = deleted + purge(KEYS[2], redis.call('ZRANGE', KEYS[2], 0, math.min(excess, limit) - 1))
end
return deleted
