#!lua flags=allow-oom
-- extend_lease: renew the leases of tasks a worker is still running.
--
-- KEYS[1]  <ns>:{<q>}:lease         sorted set, score = lease deadline
-- KEYS[2]  <ns>:{<q>}:guard         never exists, never read: on a Redis Cluster, a node moving
--                                   the slot refuses the call (TRYAGAIN) before it starts
--                                   (keys.QueueKeys.guard)
-- ARGV[1]  task key prefix <ns>:{<q>}:t:
-- ARGV[2]  lease in seconds from now
-- ARGV[3], ARGV[4], ...  pairs of task id and the epoch the worker holds
-- Returns  {lost, canceled}, two flat lists of pairs (id, epoch held): id, epoch, id, ...
--          lost: the runs whose lease is lost (recovered and handed on since: the epoch moved
--          on): the worker must not write their outcome. The epoch says which run: one worker
--          may hold a stale and a new run of one task. A task that finished under the same
--          epoch (its outcome was written a moment ago, or deleted with retention 0) is neither
--          extended nor lost. A record that is not a hash (overwritten by hand) is lost.
--          canceled: the runs renewed whose task an operator asked to cancel (the mark of
--          cancel.lua): the worker interrupts them with JobCanceled.
--          An error names KEYS[1] if it is not a sorted set (nothing changed).
-- A run holding a slot of its job type's concurrency_limit (its record's `limited`: see
-- dequeue.lua) has that slot's lease renewed with its own, and takes it again if a dequeue
-- pruned it meanwhile (the worker stalled past its deadline, but no recoverer took the run: it
-- goes on, and must be counted; the script that ends it gives the slot back, as every end).
local deadline = clock() + tonumber(ARGV[2])
local lost = {}
local canceled = {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  local f = redis.pcall('HMGET', ARGV[1] .. id, 'epoch', 'cancel_requested_at', 'limited')
  local epoch = f[1]
  if f.err then
    lost[#lost + 1] = id  -- not a hash: not a record of ours any more
    lost[#lost + 1] = ARGV[i + 1]
  elseif epoch == ARGV[i + 1] then
    -- The first ZSCORE comes before any ZADD: a lease key of another type changes nothing.
    local score = redis.pcall('ZSCORE', KEYS[1], id)
    if type(score) == 'table' and score.err then
      return wrong_type(KEYS[1], 'zset')
    end
    if score then
      redis.call('ZADD', KEYS[1], 'XX', deadline, id)
      if f[3] then
        redis.pcall('ZADD', string.sub(ARGV[1], 1, -3) .. 'running:' .. f[3], deadline, id)
      end
      if f[2] then
        canceled[#canceled + 1] = id
        canceled[#canceled + 1] = epoch
      end
    end
  elseif epoch then
    lost[#lost + 1] = id
    lost[#lost + 1] = ARGV[i + 1]
  end
end
return {lost, canceled}
