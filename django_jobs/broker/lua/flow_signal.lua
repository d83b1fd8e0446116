#!lua
-- flow_signal: deliver a signal to a call: the first of a name wins, and one is kept if the
-- flow does not wait for it yet.
--
-- KEYS[1]  <ns>:<fns>:{<call>}_meta     hash (the signal goes in field sig:<name>)
-- KEYS[2]  <ns>:<fns>:{<call>}_status   hash (the wait is field wait:<name>)
-- ARGV[1]  signal name
-- ARGV[2]  value (JSON)
-- Returns  "wake"      kept, and the flow waits for it now: publish an event for the call
--          "kept"      kept for a later wait
--          "gone"      no such call; "finished": the run has ended; "duplicate": a signal of
--                      this name was delivered already; "late": the wait for it timed out.
--                      Nothing written for these.
--          an error naming a key that has another type: nothing changed
local bad = wrong_type(KEYS[1], 'hash', KEYS[2], 'hash')
if bad then
  return bad
end
local status = redis.call('HGET', KEYS[1], 'status')
if not status then
  return 'gone'
end
if status == 'succeeded' or status == 'failed' or status == 'canceled' then
  return 'finished'
end
local field = 'sig:' .. ARGV[1]
if redis.call('HEXISTS', KEYS[1], field) == 1 then
  return 'duplicate'
end
local wait = redis.call('HGET', KEYS[2], 'wait:' .. ARGV[1])
local state
if wait then
  local ok, rec = pcall(cjson.decode, wait)
  state = ok and type(rec) == 'table' and rec.state
end
if state == 'timed_out' then
  return 'late'
end
redis.call('HSET', KEYS[1], field, ARGV[2])
if state == 'waiting' then
  return 'wake'
end
return 'kept'
