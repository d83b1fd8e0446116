#!lua
-- requeue: put an active task back in pending at once, without spending an attempt.
-- Used on graceful shutdown (not a crash) and when the supervisor sees a child die under its
-- task (a crash: counted, and past the crash budget the task goes dead).
--
-- KEYS[1]  <ns>:{<q>}:t:<id>        task record
-- KEYS[2]  <ns>:{<q>}:active        list
-- KEYS[3]  <ns>:{<q>}:lease         sorted set
-- KEYS[4]  <ns>:{<q>}:pending       list
-- KEYS[5]  <ns>:{<q>}:dead          sorted set
-- KEYS[6]  <ns>:{<q>}:wake          wake-up tokens
-- ARGV[1]  task id
-- ARGV[2]  epoch the caller was given by dequeue
-- ARGV[3]  "1": count a crash; "0": a clean hand-back
-- ARGV[4]  crashes after which the task is dead
-- ARGV[5]  the reason, kept as the error when the task goes dead
-- Returns  "pending" or "dead"; 0 when the task is no longer this caller's: nothing changed; an
--          error naming a key of KEYS[1..5] that has another type (nothing changed).
local f, bad = fields(KEYS[1], 'state', 'epoch')
if not f then
  return bad
end
if f[1] ~= 'active' or f[2] ~= ARGV[2] then
  return 0
end
local id = ARGV[1]
bad = wrong_type(KEYS[4], 'list', KEYS[5], 'zset') or take(KEYS[2], KEYS[3], id)
if bad then
  return bad
end
bump(KEYS[1], 'epoch')
if ARGV[3] == '1' then
  local crashes = bump(KEYS[1], 'crashes')
  if crashes >= tonumber(ARGV[4]) then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
    redis.call('HSET', KEYS[1], 'state', 'dead', 'died_at', tostring(now),
      'failed_at', tostring(now), 'traceback', '',
      'error', 'crashed its worker ' .. crashes .. ' times: ' .. ARGV[5])
    redis.call('ZADD', KEYS[5], now, id)
    return 'dead'
  end
end
redis.call('HSET', KEYS[1], 'state', 'pending')
redis.call('RPUSH', KEYS[4], id)
wake(KEYS[6])
return 'pending'
