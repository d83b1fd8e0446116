#!lua
-- flow_write: a replay's compare-and-set write of step records and run fields, fenced by the
-- epoch of its replay lease.
--
-- KEYS[1]  <ns>:<fns>:{<call>}_meta     hash
-- KEYS[2]  <ns>:<fns>:{<call>}_status   hash
-- KEYS[3]  <ns>:<fns>:{<call>}_lease    string
-- ARGV[1]  the replay's epoch
-- ARGV[2]  mode: "keep" (renew the lease for ARGV[3] ms), "release" (end this replay: the
--          run is suspended until its next event; meta `released` = the epoch, see
--          flow_renew), "finish" (end the run: release, and keep
--          the call's keys for ARGV[3] seconds)
-- ARGV[3]  lease in milliseconds ("keep") or retention in seconds ("finish")
-- ARGV[4]  meta fields (one per line) whose presence refuses the write ("signaled"), or "": a
--          wait (or first_of) that suspends, or times out, checks its signals in the script
-- ARGV[5]  how many status field/value pairs follow (then the meta field/value pairs)
-- Returns  "ok"; "lost" when the lease is not this epoch's (expired, taken over): nothing
--          written; "canceled" when cancel() was asked (except for "finish"): nothing written;
--          "signaled" (see ARGV[4]): nothing written; an error naming a key of another type.
local bad = wrong_type(KEYS[1], 'hash', KEYS[2], 'hash', KEYS[3], 'string')
if bad then
  return bad
end
local epoch = ARGV[1]
if redis.call('GET', KEYS[3]) ~= epoch or redis.call('HGET', KEYS[1], 'epoch') ~= epoch then
  return 'lost'
end
local mode = ARGV[2]
if mode ~= 'finish' and redis.call('HEXISTS', KEYS[1], 'cancel') == 1 then
  return 'canceled'
end
for unless in string.gmatch(ARGV[4], '[^\n]+') do
  if redis.call('HEXISTS', KEYS[1], unless) == 1 then
    return 'signaled'
  end
end
local n = tonumber(ARGV[5])
local first_meta = 6 + 2 * n
if n > 0 then
  redis.call('HSET', KEYS[2], unpack(ARGV, 6, first_meta - 1))
end
if #ARGV >= first_meta then
  redis.call('HSET', KEYS[1], unpack(ARGV, first_meta))
end
if mode == 'keep' then
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
else
  redis.call('DEL', KEYS[3])
  redis.call('HSET', KEYS[1], 'released', epoch)  -- flow_renew: "ok" for this replay's ticks
  if mode == 'finish' then
    redis.call('HSET', KEYS[1], 'finished_at', tostring(clock()))
    redis.call('EXPIRE', KEYS[1], ARGV[3])
    redis.call('EXPIRE', KEYS[2], ARGV[3])
  end
end
return 'ok'
