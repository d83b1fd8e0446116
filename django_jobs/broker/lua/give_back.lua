#!lua
-- give_back: put back in pending the tasks one dequeue call handed out whose reply its caller
-- never read (the connection failed or timed out after the call was sent, or a stopping child
-- gave up on its wait): they are found by the fetch's receipt, which dequeue wrote in their
-- records, and go back to the head of the line at once instead of waiting in active until their
-- lease expires. No attempt and no crash is spent (the caller never started them); the epoch
-- moves on, a concurrency slot is given back (`release`), and the rate_limit start its dequeue
-- counted (`unrate`); a task an operator asked to cancel
-- meanwhile (cancel.lua's mark) is canceled instead (`unwanted`), as requeue does. Safe to run
-- twice: a task given back is no longer active. Reads the whole active list: a rare call (after a lost reply only).
--
-- KEYS[1]  <ns>:{<q>}:active        list
-- KEYS[2]  <ns>:{<q>}:lease         sorted set
-- KEYS[3]  <ns>:{<q>}:pending       list
-- KEYS[4]  <ns>:{<q>}:wake          wake-up tokens
-- KEYS[5]  <ns>:{<q>}:guard         (keys.QueueKeys.guard: a slot on the move refuses the call)
-- ARGV[1]  task key prefix <ns>:{<q>}:t:
-- ARGV[2]  the receipt of the dequeue call whose reply was lost
-- ARGV[3]  retention in seconds of a task whose message cannot be read (for `unwanted`)
-- Returns  how many tasks went back; an error naming a key of KEYS[1..3] that has another type
--          (nothing changed).
local canceled = string.sub(ARGV[1], 1, -3) .. 'canceled'  -- <ns>:{<q>}:canceled
local bad = wrong_type(KEYS[1], 'list', KEYS[2], 'zset', KEYS[3], 'list', canceled, 'zset')
if bad then
  return bad
end
local ids = redis.call('LRANGE', KEYS[1], 0, -1)
local given = 0
-- Oldest last in active (dequeue pushes on the left): back in pending oldest first, as taken.
for i = #ids, 1, -1 do
  local id = ids[i]
  local key = ARGV[1] .. id
  local f = redis.pcall('HMGET', key, 'state', 'receipt', 'limited', 'cancel_requested_at',
    'rated')
  if not f.err and f[1] == 'active' and f[2] == ARGV[2] then
    redis.call('LREM', KEYS[1], 1, id)
    redis.call('ZREM', KEYS[2], id)
    bump(key, 'epoch')
    redis.call('HDEL', key, 'receipt')
    unrate(key, id, f[5], true)
    if f[3] then
      release(key, id, f[3])
    end
    if f[4] then
      unwanted(key, id, ARGV[3])
    else
      back(key, id, KEYS[3], KEYS[4])
    end
    given = given + 1
  end
end
return given
