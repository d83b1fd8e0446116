#!lua
-- flow_start: record a new flow run (its metadata hash and status hash), once per call id.
--
-- KEYS[1]  <ns>:<fns>:{<call>}_meta     hash: flow, input, metadata, status, epoch, ...
-- KEYS[2]  <ns>:<fns>:{<call>}_status   hash: one field per step
-- KEYS[3]  <ns>:<fns>:runs              sorted set of call ids, score = started at
-- KEYS[4]  <ns>:<fns>:runs:<flow>       sorted set of one flow's call ids
-- KEYS[5]  <ns>:<fns>:idem:<flow>:<key> optional: the call id holding an idempotency key
-- ARGV[1]  call id
-- ARGV[2]  flow name
-- ARGV[3]  input (JSON)
-- ARGV[4]  metadata (JSON)
-- ARGV[5]  lifetime of the idempotency key in milliseconds (used only with KEYS[5])
-- ARGV[6]  the version of the flow's code starting it (Flow.version; "1" if absent)
-- ARGV[7]  the run's nonce (a uuid): its atomic steps' keys, so a call id reused after the run
--          expired is a new run to them (optional)
-- Returns  {"ok", call}         recorded
--          {"exists", status}   this call id is already recorded (a replayed or repeated
--                               start): nothing changed
--          {"duplicate", call}  the idempotency key belongs to call: nothing changed
--          an error naming a key that has another type: nothing changed
-- The index keys (KEYS[3..5]) are not in the call's slot: on a Redis Cluster this script is,
-- like dequeue, the one that spans slots (see docs/flows.rst).
local bad = wrong_type(KEYS[1], 'hash', KEYS[2], 'hash', KEYS[3], 'zset', KEYS[4], 'zset')
if bad then
  return bad
end
if KEYS[5] then
  local holder = redis.pcall('GET', KEYS[5])
  if type(holder) == 'table' and holder.err then
    return wrong_type(KEYS[5], 'string')
  end
  if holder and holder ~= ARGV[1] then
    return {'duplicate', holder}
  end
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
redis.call('ZADD', KEYS[3], now, ARGV[1])
redis.call('ZADD', KEYS[4], now, ARGV[1])
if KEYS[5] then
  redis.call('SET', KEYS[5], ARGV[1], 'PX', ARGV[5])
end
return {'ok', ARGV[1]}
