#!lua flags=allow-oom
-- discard: delete a task whose record is broken, a key of another type (written by hand or by
-- another program in our namespace), gone, or a hash without a state, wherever its id is listed
-- but active (a running task's record is the worker's to judge).
--
-- KEYS[1]  <ns>:{<q>}:t:<id>        task record
-- KEYS[2]  <ns>:{<q>}:pending       list
-- KEYS[3..] the queue's sorted sets of ids: scheduled, retry, dead, completed
-- ARGV[1]  task id
-- Returns  1 when something was deleted; 0 when the record is a task of ours (delete it with
--          `delete`) or nothing was left; an error naming a structure of another type.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'hash' and redis.call('HEXISTS', KEYS[1], 'state') == 1 then
  return 0
end
local bad = wrong_type(KEYS[2], 'list')
for i = 3, #KEYS do
  bad = bad or wrong_type(KEYS[i], 'zset')
end
if bad then
  return bad
end
local id = ARGV[1]
local removed = redis.call('DEL', KEYS[1]) + redis.call('LREM', KEYS[2], 0, id)
for i = 3, #KEYS do
  removed = removed + redis.call('ZREM', KEYS[i], id)
end
if removed > 0 then
  return 1
end
return 0
