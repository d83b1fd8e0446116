#!lua flags=allow-oom
-- handoff_done: the last step of a hand-off (see handoff.lua): its task is written in its own
-- queue, or was refused there, so forget its enqueue; for a refused one, or an operator's
-- delete of the task, also release the idempotency key if it still names this task. Only
-- deletes: safe to run twice, and allowed under maxmemory.
--
-- KEYS[1]  <ns>:{<home>}:handoff             sorted set of handed-off ids
-- KEYS[2]  <ns>:{<home>}:handoff:tasks       hash: id -> its enqueue
-- KEYS[3]  <ns>:{<home>}:idem:<job>:<key>    optional: the key to release
-- ARGV[1]  task id
-- ARGV[2]  the value KEYS[3] holds for this task ("<id> <queue>"): released only if so
-- Returns  1 when the key was released, else 0; an error naming a key that has another type
--          (nothing changed).
local bad = wrong_type(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'string')
if bad then
  return bad
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return release_key(KEYS[3], ARGV[2])
