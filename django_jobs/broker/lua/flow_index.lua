#!lua
-- flow_index: list a flow run in an index of runs, by its start (Redis time), once: a start
-- replayed keeps its first place. FlowStore.start writes both indexes beside flow_start.
--
-- KEYS[1]  <ns>:<fns>:runs or <ns>:<fns>:runs:<flow>   sorted set of call ids, score = start
-- ARGV[1]  call id
-- Returns  1 when listed now, 0 when it was already; an error if KEYS[1] is not a sorted set
local bad = wrong_type(KEYS[1], 'zset')
if bad then
  return bad
end
return redis.call('ZADD', KEYS[1], 'NX', clock(), ARGV[1])
