#!lua
-- flow_acquire: take a call's replay lease under a new epoch and read the call's state.
--
-- KEYS[1]  <ns>:<fns>:{<call>}_meta     hash
-- KEYS[2]  <ns>:<fns>:{<call>}_status   hash
-- KEYS[3]  <ns>:<fns>:{<call>}_lease    string: the epoch of the replay holding the lease
-- ARGV[1]  lease in milliseconds
-- Returns  {"ok", epoch, meta, status}  the lease is this replay's, under `epoch`; meta and
--                                       status as flat field/value lists
--          {"gone"}                     no such call (never started, or removed after its
--                                       retention)
--          {"finished", status}         the run has ended (succeeded, failed, canceled)
--          {"busy", pttl}               another replay holds the lease for pttl more ms
--          an error naming a key that has another type: nothing changed
-- A sleeping or waiting run is "running" again from here.
-- Every later write of the replay (flow_write) is a compare-and-set on that epoch: a replay
-- whose lease expired (its worker froze or died) and was taken over can write nothing.
local bad = wrong_type(KEYS[1], 'hash', KEYS[2], 'hash', KEYS[3], 'string')
if bad then
  return bad
end
local over, status = ended(KEYS[1])
if over then
  return {over, status}  -- {'gone'}, or {'finished', status}
end
local pttl = redis.call('PTTL', KEYS[3])
if pttl > 0 then
  return {'busy', pttl}
end
local epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
if status ~= 'running' then
  redis.call('HSET', KEYS[1], 'status', 'running')  -- woken from a sleep or a wait
end
redis.call('SET', KEYS[3], epoch, 'PX', ARGV[1])
return {'ok', epoch, redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2])}
