-- Helpers for the scripts: scripts.py puts those a script calls between its shebang line and
-- the script itself.
--
-- wrong_type(key, type, key, type, ...): an error reply naming the first key that exists with
-- another type than the one we keep there, else nil; a nil key (an optional one the caller did
-- not pass) is skipped. A script calls it before its first write, so that a key django-jobs did
-- not write (by hand, by another program) makes the script change nothing instead of failing
-- half-way (a script's writes before an error stay).
local function wrong_type(...)
  local checks = {...}
  for i = 1, select('#', ...), 2 do
    if checks[i] then
      local kind = redis.call('TYPE', checks[i]).ok
      if kind ~= 'none' and kind ~= checks[i + 1] then
        return redis.error_reply('WRONGKEY ' .. kind .. ' ' .. checks[i + 1] .. ' ' .. checks[i])
      end
    end
  end
  return nil
end
-- release_key(key, holder): delete an idempotency key if it still holds holder (what it held for
-- the task: so the same work can be enqueued again, and a key another task took since is
-- kept); a nil key (none passed) does nothing. Returns 1 when released, else 0. The caller has
-- checked the key's type (wrong_type(key, 'string')).
local function release_key(key, holder)
  if key and redis.call('GET', key) == holder then
    redis.call('DEL', key)
    return 1
  end
  return 0
end
-- count(key, ttl): add one to a day counter, created with a lifetime of ttl seconds. A counter
-- that is not a number is skipped: statistics never stop a state change.
local function count(key, ttl)
  if redis.pcall('INCR', key) == 1 then
    redis.call('EXPIRE', key, ttl)  -- a new day's counter
  end
end
-- wake(key, n): leave n wake-up tokens (default 1) for idle workers, at most 64 in all (a token
-- per idle worker is plenty). A wake key of the wrong type is skipped: a token is a hint, workers
-- also look on their own. The one place a script pushes a token.
local function wake(key, n)
  local len
  if n and n > 1 then
    local tokens = {}
    for i = 1, math.min(n, 64) do
      tokens[i] = '1'
    end
    len = redis.pcall('LPUSH', key, unpack(tokens))
  else
    len = redis.pcall('LPUSH', key, '1')
  end
  if type(len) == 'number' and len > 64 then
    redis.call('LTRIM', key, 0, 63)
  end
end
-- clock(): Redis' own time now, in epoch seconds (every script's clock: never the caller's).
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
-- stamp(t): a time as written in a record: epoch seconds to the microsecond (tostring keeps
-- 14 digits, a tenth of a millisecond: two enqueues that close would tie in a merged listing).
local function stamp(t)
  return string.format('%.6f', t)
end
-- bump(key, field): add one to a counter field of a task record and return it. A field written
-- by hand as garbage counts as 0 (as the Python side reads it), so it starts over at 1.
local function bump(key, field)
  local n = redis.pcall('HINCRBY', key, field, 1)
  if type(n) == 'table' then
    n = 1
    redis.call('HSET', key, field, n)
  end
  return n
end
-- bury(key, kind, id, dead, now): the record of task `id` holds a <kind> we did not write (by
-- hand, by another program), so the task cannot run: replace that value with a dead record
-- that says so, and file the id in the dead set, where the admin shows it, instead of leaving
-- it stranded in a list.
local function bury(key, kind, id, dead, now)
  redis.call('DEL', key)
  redis.call('HSET', key, 'state', 'dead', 'msg', '', 'attempts', 0, 'crashes', 0, 'epoch', 0,
    'died_at', stamp(now), 'failed_at', stamp(now), 'traceback', '',
    'error', 'its record ' .. key .. ' was a ' .. kind .. ', not a hash (written by hand or by '
      .. 'another program?): replaced by this dead record')
  redis.call('ZADD', dead, now, id)
end
-- fields(key, field, ...): HMGET of a task record; nil and an error reply instead when the key
-- holds something else (a read: nothing is written yet).
local function fields(key, ...)
  local f = redis.pcall('HMGET', key, ...)
  if f.err then
    return nil, wrong_type(key, 'hash')
  end
  return f
end
-- take(active, lease, id): a running task's first write, removing its id from active and lease.
-- Returns an error reply, with nothing written, when either key holds something else. No TYPE
-- call on the hot path: LREM fails whole or applies, and when the ZREM after it fails the id
-- goes back to active (at its head, where dequeue put it: the order of active is not read; the
-- lease set is what the recoverer reads).
local function take(active, lease, id)
  if type(redis.pcall('LREM', active, 1, id)) == 'table' then
    return wrong_type(active, 'list')
  end
  if type(redis.pcall('ZREM', lease, id)) == 'table' then
    redis.call('LPUSH', active, id)
    return wrong_type(lease, 'zset')
  end
  return nil
end
-- range(key, arg, ...): ZRANGE of a sorted set of ours; nil and an error reply instead when the
-- key holds something else (a read: nothing is written yet, and no TYPE call when all is well).
local function range(key, ...)
  local ids = redis.pcall('ZRANGE', key, ...)
  if ids.err then
    return nil, wrong_type(key, 'zset')
  end
  return ids
end
-- due(delay, eta): Redis' time now, and when a new task is due: at eta (epoch seconds) unless
-- it is "", else delay seconds from now (0 or less: now). The one rule of enqueue and
-- enqueue_many.
local function due(delay, eta)
  local now = clock()
  if eta ~= '' then
    return now, tonumber(eta)
  end
  return now, now + math.max(0, tonumber(delay))
end
-- ended(meta): why flow run record `meta` takes nothing more: 'gone' (no such run: never
-- started, or removed after its retention), or 'finished' and its status (succeeded, failed,
-- canceled); nil and its status while the run goes on. The one place a flow script tells a run
-- that ended (flow_acquire, flow_cancel, flow_signal); it only reads.
local function ended(meta)
  local status = redis.call('HGET', meta, 'status')
  if not status then
    return 'gone'
  end
  if status == 'succeeded' or status == 'failed' or status == 'canceled' then
    return 'finished', status
  end
  return nil, status
end
-- held(key, epoch, done, gone): the stale-epoch guard every outcome script opens with (ack,
-- retry, kill, requeue), before any write. Returns true when task record `key` is active under
-- `epoch` (the caller still holds the run: go on), the job type whose concurrency slot the run
-- holds (its `limited` field, written by dequeue: give the slot back with `release` once the run
-- is filed; false for a job without a concurrency_limit) and whether an operator asked to cancel
-- the run (its `cancel_requested_at`, cancel.lua's mark); else the reply to return at once,
-- nothing written: 1 when the record is already in state `done` under that epoch, or canceled
-- with the cancel mark (a replay of this very call, retried by redis-py after a timeout; false:
-- no replay to recognise), `gone`
-- when the record has no state (default 0), 0 when the task is no longer this caller's
-- (recovered and handed on: another epoch; or not active), or the error when the key is not a
-- hash.
local function held(key, epoch, done, gone)
  local f, bad = fields(key, 'state', 'epoch', 'limited', 'cancel_requested_at')
  if not f then
    return bad
  end
  if not f[1] then
    return gone or 0
  end
  if f[2] == epoch and (f[1] == done or (done and f[1] == 'canceled' and f[4])) then
    return 1  -- (canceled with the mark: this call filed the run canceled instead, `unwanted`)
  end
  if f[1] ~= 'active' or f[2] ~= epoch then
    return 0
  end
  return true, f[3], f[4]
end
-- claim(record, epoch, done, active, lease, id, key, type, ...): the opening of an outcome
-- script that files the task elsewhere (retry, kill, requeue): the stale-epoch guard (`held`,
-- no record answering 0), then the types of the keys it will write (key, type pairs, as for
-- `wrong_type`; with the queue's canceled set when the run was asked to cancel: see
-- `unwanted`), then `take` of id from active and lease. Returns nil when the caller holds the
-- run and the task is out of active and lease (go on), the job type whose slot to `release` and
-- the cancel mark (as `held`); else the reply to return at once, with nothing written.
local function claim(record, epoch, done, active, lease, id, ...)
  local stale, limited, marked = held(record, epoch, done)
  if stale ~= true then
    return stale
  end
  local bad = wrong_type(...)
  if not bad and marked then
    bad = wrong_type(string.sub(record, 1, -(#id + 3)) .. 'canceled', 'zset')
  end
  return bad or take(active, lease, id), limited, marked
end
-- back(key, id, pending, wakekey): file task `id` (record `key`) as pending at the head of the
-- line (it has waited longest) and leave a wake-up token. Returns 'pending'.
local function back(key, id, pending, wakekey)
  redis.call('HSET', key, 'state', 'pending')
  redis.call('RPUSH', pending, id)
  wake(wakekey)
  return 'pending'
end
-- unpark(prefix, job, n): move up to n tasks of job type `job` parked in the queue of key prefix
-- `prefix` (<ns>:{<q>}:) for want of a concurrency slot (see dequeue.lua) back to the head of
-- its pending list, oldest first, and leave a wake-up token for each; returns how many moved. A
-- parked id whose record is no longer pending (deleted, canceled by an operator meanwhile) is
-- dropped on the way; one whose record is not a hash goes on, for dequeue to file as dead. Keys
-- of another type are skipped: a limit never stops a state change.
local function unpark(prefix, job, n)
  local parked = prefix .. 'parked:' .. job
  local moved = 0
  while moved < n do
    local id = redis.pcall('RPOP', parked)
    if type(id) ~= 'string' then
      break  -- none left (false), or not a list
    end
    local state = redis.pcall('HGET', prefix .. 't:' .. id, 'state')
    if state == 'pending' or type(state) == 'table' then
      if type(redis.pcall('RPUSH', prefix .. 'pending', id)) == 'table' then
        redis.call('RPUSH', parked, id)
        break
      end
      moved = moved + 1
    end
  end
  if moved > 0 then
    wake(prefix .. 'wake', moved)
  end
  return moved
end
-- release(record, id, job): the run of task `id` (record key `record`, which is the queue's
-- prefix <ns>:{<q>}: then t:<id>) gives its slot in job type `job`'s concurrency limit back and
-- the oldest task parked for one goes back to pending (`unpark`): the one place a slot is given
-- back, by every script that ends a run holding one (`held` and `claim` say which). A holder
-- whose worker died is also pruned once its lease deadline passed, by dequeue and by the
-- recoverer's sweep, which also unparks for it.
local function release(record, id, job)
  local prefix = string.sub(record, 1, -(#id + 3))
  redis.pcall('ZREM', prefix .. 'running:' .. job, id)
  redis.pcall('HDEL', record, 'limited')
  unpark(prefix, job, 1)
end
-- unrate(record, id, rated, give): the run of task `id` (record key `record`, <ns>:{<q>}:t:<id>)
-- was counted against its job type's rate_limit by its dequeue (`rated`, "<window> <job>": see
-- dequeue.lua; false when it was not): forget that mark and, when `give` (the run did not go
-- on: a clean hand-back, a give-back by receipt), give the start back while that window is
-- current. The one place a start is given back (requeue, give_back); a rate key of another type
-- is skipped.
local function unrate(record, id, rated, give)
  if not rated then
    return
  end
  redis.call('HDEL', record, 'rated')
  local window, job = string.match(rated, '^(%d+) (.+)$')
  if job and give then
    local rate = string.sub(record, 1, -(#id + 3)) .. 'rate:' .. job
    local r = redis.pcall('HMGET', rate, 'window', 'started')
    if not r.err and tonumber(r[1]) == tonumber(window) and (tonumber(r[2]) or 0) > 0 then
      redis.call('HINCRBY', rate, 'started', -1)
    end
  end
end
-- crashed(key, id, budget, why, pending, dead, wakekey): the crash-count rule, the one place it
-- is written (recover: a lease expired; requeue: the supervisor saw the child die). A crash is
-- not a failure: no attempt is spent, but it is counted, and the task whose crashes reach
-- `budget` (MAX_CRASHES) goes dead with the error "crashed its worker N times: <why>", so it
-- cannot loop forever; else it goes `back` to pending. The caller has taken the id out of active
-- and lease and moved the epoch on, and checked the types of pending and dead. Returns 'dead' or
-- 'pending'.
local function crashed(key, id, budget, why, pending, dead, wakekey)
  local crashes = bump(key, 'crashes')
  if crashes < tonumber(budget) then
    return back(key, id, pending, wakekey)
  end
  local now = clock()
  redis.call('HSET', key, 'state', 'dead', 'died_at', stamp(now), 'failed_at', stamp(now),
    'traceback', '', 'error', 'crashed its worker ' .. crashes .. ' times: ' .. why)
  redis.call('ZADD', dead, now, id)
  return 'dead'
end
-- shelve(key, id, canceled, default, now): file task `id` (record `key`, its structure left
-- already) as canceled: state canceled, canceled_at now, and its id in the canceled set until
-- now + the retention its message says (`default` seconds when the message cannot be read); a
-- retention of 0 deletes the record instead, as ack does. The one place a task becomes canceled
-- (cancel: it was waiting; end_canceled: its run stopped). The caller checked the types.
local function shelve(key, id, canceled, default, now)
  local ok, msg = pcall(cjson.decode, redis.call('HGET', key, 'msg') or '')
  local retention = tonumber(default)
  if ok and type(msg) == 'table' and type(msg.retention) == 'number' then
    retention = msg.retention
  end
  if retention <= 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('HDEL', key, 'next_at', 'receipt')  -- a run's fetch receipt ends with it
  redis.call('HSET', key, 'state', 'canceled', 'canceled_at', stamp(now))
  redis.call('ZADD', canceled, now + retention, id)
end
-- unwanted(key, id, default): the run of task `id` (record `key`, <ns>:{<q>}:t:<id>, out of
-- its structure already) ended another way than by its cancel (it failed, was handed back, its
-- worker died or its lease expired) after an operator asked to cancel it (cancel.lua's mark,
-- which the heartbeat had not delivered yet): it is canceled (`shelve`, in the queue's canceled
-- set, derived from the record's key: scripts calling this name the queue's guard key), not
-- filed for another run. Used by retry, requeue and recover; the caller checked the types (the
-- canceled set: `claim`). Returns 'canceled'.
local function unwanted(key, id, default)
  shelve(key, id, string.sub(key, 1, -(#id + 3)) .. 'canceled', default, clock())
  return 'canceled'
end
