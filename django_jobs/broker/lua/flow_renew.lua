#!lua
-- flow_renew: the supervisor's heartbeat renews the replay lease of a call its child replays.
--
-- KEYS[1]  <ns>:<fns>:{<call>}_meta     hash
-- KEYS[2]  <ns>:<fns>:{<call>}_lease    string
-- ARGV[1]  the replay's epoch
-- ARGV[2]  lease in milliseconds
-- Returns  "ok" (renewed), "lost" (the lease is not this epoch's: the replay must stop, and
--          can write nothing) or "canceled" (renewed, but cancel() was asked: interrupt the
--          running step).
if redis.pcall('GET', KEYS[2]) ~= ARGV[1] then
  return 'lost'
end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
if redis.pcall('HEXISTS', KEYS[1], 'cancel') == 1 then
  return 'canceled'
end
return 'ok'
