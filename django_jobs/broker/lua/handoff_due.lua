#!lua flags=no-writes
-- handoff_due: the hand-offs a caller left unfinished (it died, or lost Redis, between the
-- steps of handoff.lua): those handed off at least `grace` seconds ago, oldest first.
--
-- KEYS[1]  <ns>:{<home>}:handoff             sorted set of handed-off ids
-- KEYS[2]  <ns>:{<home>}:handoff:tasks       hash: id -> its enqueue
-- ARGV[1]  grace in seconds
-- ARGV[2]  most entries to return
-- Returns  a flat list: id, its enqueue (JSON, or "" when it is missing), id, ...; an error
--          naming a key that has another type.
local ids, bad = range(KEYS[1], '-inf', clock() - tonumber(ARGV[1]), 'BYSCORE', 'LIMIT', 0,
  ARGV[2])
if not ids then
  return bad
end
local out = {}
if #ids == 0 then
  return out  -- the common case of a tick
end
bad = wrong_type(KEYS[2], 'hash')
if bad then
  return bad
end
for _, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[2], id) or ''
end
return out
