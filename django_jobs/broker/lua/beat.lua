#!lua
-- beat: publish a worker in the registry, and drop workers that stopped beating.
-- Scores are Redis TIME, so a worker with a fast clock cannot drop the others.
--
-- KEYS[1]  <ns>:workers             sorted set of worker ids, score = last beat
-- KEYS[2]  <ns>:worker:<id>         hash describing the worker
-- ARGV[1]  worker id
-- ARGV[2]  seconds the entry lives without a new beat
-- ARGV[3], ARGV[4], ...  field/value pairs for the hash
-- Returns  the beat time (Redis TIME, epoch seconds) as a string; an error naming a key of KEYS
--          that has another type (nothing changed).
local bad = wrong_type(KEYS[1], 'zset', KEYS[2], 'hash')
if bad then
  return bad
end
local now = clock()
local ttl = tonumber(ARGV[2])
local fields = {}
for i = 3, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
redis.call('HSET', KEYS[2], 'last_beat', stamp(now), unpack(fields))
redis.call('EXPIRE', KEYS[2], ttl)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
return stamp(now)
