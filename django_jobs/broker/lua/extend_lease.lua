-- extend_lease: renew the leases of tasks a worker is still running.
--
-- KEYS[1]  <ns>:{<q>}:lease         sorted set, score = lease deadline
-- ARGV[1]  task key prefix <ns>:{<q>}:t:
-- ARGV[2]  lease in seconds from now
-- ARGV[3], ARGV[4], ...  pairs of task id and the epoch the worker holds
-- Returns  the ids whose lease is lost (recovered and handed on since: the epoch moved on): the
--          worker must not write their outcome. A task that finished under the same epoch (its
--          outcome was written a moment ago, or deleted with retention 0) is neither extended
--          nor lost.
local t = redis.call('TIME')
local deadline = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[2])
local lost = {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  local epoch = redis.call('HGET', ARGV[1] .. id, 'epoch')
  if epoch == ARGV[i + 1] then
    if redis.call('ZSCORE', KEYS[1], id) then
      redis.call('ZADD', KEYS[1], 'XX', deadline, id)
    end
  elseif epoch then
    lost[#lost + 1] = id
  end
end
return lost
