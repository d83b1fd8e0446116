#!lua
-- flow_signal: deliver a signal to a call: the first of a name wins, and one is kept if the
-- flow does not wait for it yet.
--
-- KEYS[1]  <ns>:<fns>:{<call>}_meta     hash (the signal goes in field sig:<name>)
-- KEYS[2]  <ns>:<fns>:{<call>}_status   hash (the wait is field wait:<name>, or the field that
--          meta field await:<name> names: a first_of waiting for several signals)
-- ARGV[1]  signal name
-- ARGV[2]  value (JSON)
-- Returns  "wake"      kept, and the flow waits for it now: publish an event for the call
--          "kept"      kept for a later wait
--          "gone"      no such call; "finished": the run has ended; "duplicate": a signal of
--                      this name was delivered already; "late": the wait for it timed out
--                      (a first_of: it timed out, or another of its signals came first).
--                      Nothing written for these.
--          an error naming a key that has another type: nothing changed
local bad = wrong_type(KEYS[1], 'hash', KEYS[2], 'hash') or ended(KEYS[1])
if bad then
  return bad
end
local field = 'sig:' .. ARGV[1]
if redis.call('HEXISTS', KEYS[1], field) == 1 then
  return 'duplicate'
end
local wait = redis.call('HGET', KEYS[2], 'wait:' .. ARGV[1])
if not wait then
  local first = redis.call('HGET', KEYS[1], 'await:' .. ARGV[1])
  if first then
    wait = redis.call('HGET', KEYS[2], first)
  end
end
local state
if wait then
  local ok, rec = pcall(cjson.decode, wait)
  state = ok and type(rec) == 'table' and rec.state
  if state == 'waiting' and type(rec.signals) == 'table' then
    for _, other in ipairs(rec.signals) do
      if redis.call('HEXISTS', KEYS[1], 'sig:' .. tostring(other)) == 1 then
        return 'late'  -- a first_of another of whose signals came first
      end
    end
  end
end
if state == 'timed_out' or state == 'received' then
  return 'late'
end
redis.call('HSET', KEYS[1], field, ARGV[2], 'sigseq:' .. ARGV[1],
  redis.call('HINCRBY', KEYS[1], 'signals', 1))
if state == 'waiting' then
  return 'wake'
end
return 'kept'
