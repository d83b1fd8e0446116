#!lua
-- flow_start: record a new flow run (its metadata hash and status hash), once per call id.
-- Its idempotency key was taken before, and its index entries are written beside it, each in
-- its own slot (broker/flows.py: FlowStore.start).
--
-- KEYS[1]  <ns>:<fns>:{<call>}_meta     hash: flow, input, metadata, status, epoch, ...
-- KEYS[2]  <ns>:<fns>:{<call>}_status   hash: one field per step
-- ARGV[1]  call id
-- ARGV[2]  flow name
-- ARGV[3]  input (JSON)
-- ARGV[4]  metadata (JSON)
-- ARGV[5]  (unused: the idempotency key's lifetime, when this script took the key)
-- ARGV[6]  the version of the flow's code starting it (Flow.version; "1" if absent)
-- ARGV[7]  the run's nonce (a uuid): its atomic steps' keys, so a call id reused after the run
--          expired is a new run to them (optional)
-- Returns  {"ok", call}         recorded
--          {"exists", status}   this call id is already recorded (a replayed or repeated
--                               start): nothing changed
--          an error naming a key that has another type: nothing changed
local bad = wrong_type(KEYS[1], 'hash', KEYS[2], 'hash')
if bad then
  return bad
end
local status = redis.call('HGET', KEYS[1], 'status')
if status then
  return {'exists', status}
end
local now = clock()
redis.call('HSET', KEYS[1], 'flow', ARGV[2], 'input', ARGV[3], 'metadata', ARGV[4],
  'status', 'running', 'epoch', 0, 'created_at', tostring(now), 'version', ARGV[6] or '1')
if ARGV[7] then
  redis.call('HSET', KEYS[1], 'nonce', ARGV[7])
end
return {'ok', ARGV[1]}
