#!lua
-- flow_renew: the supervisor's heartbeat renews the replay lease of a call its child replays.
--
-- KEYS[1]  <ns>:<fns>:{<call>}_meta     hash
-- KEYS[2]  <ns>:<fns>:{<call>}_lease    string
-- ARGV[1]  the replay's epoch
-- ARGV[2]  lease in milliseconds
-- Returns  "ok" (renewed; or no lease because this very replay released or finished the run,
--          meta `released` = its epoch, written by flow_write: it runs its end or its hooks and
--          writes no more), "lost" (the lease is another epoch's, or expired unreleased, or gone
--          with another epoch: the replay must stop, and can write nothing) or "canceled"
--          (renewed, but cancel() was asked: interrupt the running step).
local lease = redis.pcall('GET', KEYS[2])
if lease ~= ARGV[1] then
  if not lease and redis.pcall('HGET', KEYS[1], 'released') == ARGV[1]
      and redis.pcall('HGET', KEYS[1], 'epoch') == ARGV[1] then
    return 'ok'
  end
  return 'lost'
end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
if redis.pcall('HEXISTS', KEYS[1], 'cancel') == 1 then
  return 'canceled'
end
return 'ok'
