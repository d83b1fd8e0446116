#!lua
-- dequeue: move up to `count` pending tasks to active, from the queues in priority order, each
-- with a lease and a new epoch. The first queue is drained before the second is looked at.
--
-- This is the one script that spans queues (one round trip whatever their number): its keys are
-- on several Redis Cluster slots. On a Cluster, run one worker per queue (--queues q), which
-- makes it single-slot again.
--
-- Limits per job type (Job.concurrency_limit, Job.rate_limit: broker/limits.py), for the job
-- types given in ARGV, are held here, counted per queue: their keys are the queue's
-- (<ns>:{<q>}:..., on its slot), so a job type enqueued on two queues has its limits on each.
-- - A task over its concurrency limit is parked: its id moves to the list
--   <ns>:{<q>}:parked:<job> (its record still says pending) and its job type is noted in the
--   hash <ns>:{<q>}:limits (job -> limit). The end of a run holding a slot moves the oldest
--   parked task back to pending (`release` in _prelude.lua: ack, retry, kill, requeue, recover),
--   and the recoverer's sweep (recover.lua) fills slots whose holder died.
-- - A running task of such a job type holds a lease in the sorted set <ns>:{<q>}:running:<job>,
--   scored by its lease deadline and renewed with it (extend_lease): a holder whose worker died
--   is pruned once the deadline passed. Its record's `limited` field names the job type, so that
--   the script ending the run knows which slot to give back.
-- - Starts are counted in fixed windows of the period (window = floor(now / period)), in the
--   hash <ns>:{<q>}:rate:<job>: `window` and `started` (starts in it), `booked_window` and
--   `booked` (the last window tasks are booked in, and how many are booked there). No window
--   admits more than the rate's count. A task over it is booked in the first window with room
--   (after those already booked: first come, first served), filed as scheduled at that window's
--   start with `rate_booked` = the window in its record, so the forwarder brings it back then: a
--   backlog is spread over the windows, each task scheduled once, not all retried each window.
--   A booked task starts before new ones, while its window has room. The record of a run
--   counted keeps `rated` (the window and the job type): a task handed back (requeue.lua,
--   not a crash) did not run, and gives its start back while that window lasts.
-- Neither spends an attempt, moves the epoch or holds up the tasks behind it, and nothing polls.
-- A task of a job type not given costs no Redis call more than without limits (its job name is
-- read from its message, which dequeue reads anyway, only when some job type is limited).
--
-- KEYS[5i+1..5i+5]  for the i-th queue (from 0), in priority order:
--          <ns>:{<q>}:paused        present while the queue is paused
--          <ns>:{<q>}:pending       list; the oldest task is on the right
--          <ns>:{<q>}:active        list
--          <ns>:{<q>}:lease         sorted set, score = lease deadline
--          <ns>:{<q>}:dead          sorted set, for a task whose record is not a hash
-- ARGV[1]  lease in seconds
-- ARGV[2]  most tasks to move
-- ARGV[3]  this fetch's receipt (the caller's own, fresh per call: see broker/receipts.py),
--          written in each record handed out as `receipt`, so that when the reply is lost the
--          caller's next call gives those tasks back first (give_back.lua): none stranded
-- ARGV[4+i]  task key prefix <ns>:{<q>}:t: of the i-th queue
-- ARGV[4+n..]  (n queues) the limits, four per limited job type: its name, most running at once
--          (0: no cap), most starts per period (0: no rate) and the period in seconds; none for
--          a worker whose job types have no limits
-- Returns  a flat list, 9 strings per task:
--          queue index (from 0), id, msg, attempts, crashes, epoch, enqueued_at,
--          first_unknown_at, lease_deadline
--          (msg is "" when the record is missing or corrupt, and the caller must kill the task
--          with that error rather than drop it),
--          then, only when a key had another type than ours, one more element: a list of
--          "<its type> <our type> <key>". A queue whose pending, active or lease key, or a limit
--          key of a job type its next task is of, has another type is skipped (its tasks stay
--          where they are; the next queues are served); a task whose record is not a hash is
--          filed as dead (see `bury`) and not handed out.
local now = clock()
local deadline = now + tonumber(ARGV[1])
local left = tonumber(ARGV[2])
local queues = #KEYS / 5
local out = {}
local broken = {}
local function broke(key, want)
  broken[#broken + 1] = redis.call('TYPE', key).ok .. ' ' .. want .. ' ' .. key
end
-- The limited job types: name -> where its limit is in ARGV; nil when none is limited.
local limits
for i = 4 + queues, #ARGV, 4 do
  limits = limits or {}
  limits[ARGV[i]] = i
end
-- job_of(msg): the job name in an encoded message (message.encode writes "v", "id", then "job":
-- the first `,"job":"` is that key's, since a JSON string holds no bare quote); nil for a name
-- written with escapes (broker/limits.py refuses limits on such a name).
local function job_of(msg)
  local at = string.find(msg, ',"job":"', 1, true)
  return at and string.match(msg, '^([^"\\]*)"', at + 8)
end
-- admit(prefix, id, job, limit, booked): may task `id` of job type `job` (queue key prefix
-- `prefix`, limit {most, starts, period}; booked: the window it is booked in, or nil) start now?
-- Returns 'run' (its slot is taken and its start counted), 'park', 'book' and the window it is
-- now booked in, or 'broken', a limit key of another type and our type for it (nothing written).
local function admit(prefix, id, job, limit, booked)
  local most, starts, period = limit[1], limit[2], limit[3]
  local running = prefix .. 'running:' .. job
  if most > 0 then
    -- Holders past their lease deadline are no longer running (their worker died).
    if type(redis.pcall('ZREMRANGEBYSCORE', running, '-inf', now)) == 'table' then
      return 'broken', running, 'zset'
    end
    if redis.call('ZCARD', running) >= most then
      return 'park'
    end
  end
  if starts > 0 then
    local rate = prefix .. 'rate:' .. job
    local r = redis.pcall('HMGET', rate, 'window', 'started', 'booked_window', 'booked')
    if r.err then
      return 'broken', rate, 'hash'
    end
    local window = math.floor(now / period)
    local started = 0
    if tonumber(r[1]) == window then
      started = tonumber(r[2]) or 0
    end
    local bw, bn = tonumber(r[3]) or -1, tonumber(r[4]) or 0
    -- The starts of this window that tasks booked in it are owed (all, once booking moved past).
    local owed = 0
    if bw > window then
      owed = starts
    elseif bw == window then
      owed = bn
    end
    if started < starts and (booked or started + owed < starts) then
      if booked == bw then
        bn = math.max(bn - 1, 0)  -- its booking is used
      end
      redis.call('HSET', rate, 'window', window, 'started', started + 1, 'booked', bn)
    else
      -- The booking is filed in the scheduled set: one of another type refuses it before the
      -- rate hash is written (nothing half-applied).
      local scheduled = prefix .. 'scheduled'
      local kind = redis.call('TYPE', scheduled).ok
      if kind ~= 'none' and kind ~= 'zset' then
        return 'broken', scheduled, 'zset'
      end
      if bw <= window then
        bw, bn = window + 1, 0
      end
      if bn >= starts then
        bw, bn = bw + 1, 0
      end
      redis.call('HSET', rate, 'booked_window', bw, 'booked', bn + 1)
      return 'book', bw
    end
  end
  if most > 0 then
    redis.call('ZADD', running, deadline, id)
  end
  return 'run'
end
for q = 0, queues - 1 do
  if left == 0 then
    break
  end
  local paused, pending, active, lease, dead = KEYS[5 * q + 1], KEYS[5 * q + 2],
    KEYS[5 * q + 3], KEYS[5 * q + 4], KEYS[5 * q + 5]
  local tasks = ARGV[4 + q]
  local prefix = string.sub(tasks, 1, -3)  -- <ns>:{<q>}:, for the limit keys
  if redis.call('EXISTS', paused) == 0 then
    while left > 0 do
      -- pcall, and undone when the lease cannot be written, so that keys of another type
      -- leave the queue as it was: checking first would cost the hot path a call per key.
      local id = redis.pcall('LMOVE', pending, active, 'RIGHT', 'LEFT')
      if type(id) == 'table' then
        for _, pair in ipairs({{pending, 'list'}, {active, 'list'}}) do
          local kind = redis.call('TYPE', pair[1]).ok
          if kind ~= 'none' and kind ~= pair[2] then
            broke(pair[1], pair[2])
          end
        end
        break
      end
      if not id then
        break
      end
      if type(redis.pcall('ZADD', lease, deadline, id)) == 'table' then
        redis.call('LMOVE', active, pending, 'LEFT', 'RIGHT')
        broke(lease, 'zset')
        break
      end
      local key = tasks .. id
      local f = redis.pcall('HMGET', key, 'msg', 'attempts', 'crashes', 'enqueued_at',
        'first_unknown_at', 'epoch', 'rate_booked')
      if f.err then
        local kind = redis.call('TYPE', key).ok
        redis.call('ZREM', lease, id)
        redis.call('LREM', active, 1, id)
        broken[#broken + 1] = kind .. ' hash ' .. key
        bury(key, kind, id, dead, now)
      else
        local job = limits and f[1] and job_of(f[1])
        local place = job and limits[job]
        local verdict, arg, want, limit = 'run', nil, nil, nil
        if place then
          limit = {tonumber(ARGV[place + 1]), tonumber(ARGV[place + 2]),
            tonumber(ARGV[place + 3])}
          verdict, arg, want = admit(prefix, id, job, limit, tonumber(f[7]))
        end
        if verdict == 'run' then
          -- The epoch moves on (one written by hand that is not a number starts over).
          local epoch = 1
          if f[6] and string.match(f[6], '^%d+$') then
            epoch = tonumber(f[6]) + 1
          end
          if limit then
            -- `limited`: the job type whose slot the run holds; `rated`: the window its start
            -- was counted in and the job type, for a hand-back to give the start back (requeue)
            local set = {'epoch', epoch, 'state', 'active', 'started_at', stamp(now), 'receipt',
              ARGV[3]}
            if limit[1] > 0 then
              set[#set + 1], set[#set + 2] = 'limited', job
            end
            if limit[2] > 0 then
              set[#set + 1], set[#set + 2] = 'rated', math.floor(now / limit[3]) .. ' ' .. job
            end
            redis.call('HSET', key, unpack(set))
          else
            redis.call('HSET', key, 'epoch', epoch, 'state', 'active', 'started_at', stamp(now),
              'receipt', ARGV[3])
          end
          if f[7] then
            redis.call('HDEL', key, 'rate_booked')
          end
          local n = #out
          out[n + 1] = tostring(q)
          out[n + 2] = id
          out[n + 3] = f[1] or ''
          out[n + 4] = f[2] or '0'
          out[n + 5] = f[3] or '0'
          out[n + 6] = tostring(epoch)
          out[n + 7] = f[4] or ''
          out[n + 8] = f[5] or ''
          out[n + 9] = tostring(deadline)
          left = left - 1
        else
          redis.call('ZREM', lease, id)
          local parked = prefix .. 'parked:' .. job
          if verdict == 'park'
            and type(redis.pcall('LMOVE', active, parked, 'LEFT', 'LEFT')) == 'table' then
            verdict, arg, want = 'broken', parked, 'list'
          elseif verdict == 'park' then
            redis.pcall('HSET', prefix .. 'limits', job, limit[1])
          elseif verdict == 'book' then
            local at = arg * limit[3]
            if type(redis.pcall('ZADD', prefix .. 'scheduled', at, id)) == 'table' then
              verdict, arg, want = 'broken', prefix .. 'scheduled', 'zset'
            else
              redis.call('LREM', active, 1, id)
              redis.call('HSET', key, 'state', 'scheduled', 'next_at', stamp(at),
                'rate_booked', arg)
            end
          end
          if verdict == 'broken' then
            -- Back where it was, at the head of the line; the queue is skipped.
            redis.call('LMOVE', active, pending, 'LEFT', 'RIGHT')
            broke(arg, want)
            break
          end
        end
      end
    end
  end
end
if #broken > 0 then
  out[#out + 1] = broken
end
return out
