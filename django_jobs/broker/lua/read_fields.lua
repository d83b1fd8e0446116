#!lua flags=no-writes
-- read_fields: some fields of task records, each cut to a length, and no more than a budget
-- of bytes in all, so that one admin or API request reads a bounded number of bytes out of
-- Redis whatever the records hold (a hand-written one may hold megabytes in one field); and,
-- for a filter (a job, a search), only those of the records that match, so that a filter that
-- visits thousands of records moves a few bytes out of Redis per record it skips.
--
-- KEYS      the task records (<ns>:{<q>}:t:<id>), of one queue
-- ARGV[1]   the budget: no key is read after the values returned reach this many bytes (the
--           first key is always read, so that a caller always moves on)
-- ARGV[2]   the longest value returned of a small field, in bytes
-- ARGV[3]   a job's name as the message holds it (JSON-escaped), or "": only records of that
--           job are returned (the message's first "job" key, written before the payload)
-- ARGV[4]   a text as the message holds it (JSON-escaped), or "": only records whose message
--           holds it are returned (a search: the caller checks where it matched)
-- ARGV[5]   n, how many small fields follow (read in one HMGET: the state, counters, times)
-- ARGV[6..5+n]  the small fields
-- ARGV[6+n..]   pairs of a large field (the message, the error) and the longest value returned
--           of it, in bytes: measured (HSTRLEN) before it is read
-- Returns   per key read, in order (fewer than KEYS when the budget ran out): 0 when the key
--           does not exist; its type (a string) when it is not a hash; 1 when it does not
--           match the filter; else a list holding, per field (the small ones first), its
--           length in bytes and its value cut to its limit ('' when absent). Only the first
--           bytes of a cut value leave Redis.
local budget = tonumber(ARGV[1])
local small_limit = tonumber(ARGV[2])
local job, text = ARGV[3], ARGV[4]
local n = tonumber(ARGV[5])
local small = {unpack(ARGV, 6, 5 + n)}
local spent = 0
local out = {}
-- Whether record `key` matches the filter (read in Redis: nothing of it leaves).
local function matches(key)
  if job == '' and text == '' then
    return true
  end
  local msg = redis.call('HGET', key, 'msg') or ''
  if job ~= '' then
    local at = string.find(msg, ',"job":"', 1, true)
    if not at or string.sub(msg, at + 8, at + 8 + #job) ~= job .. '"' then
      return false
    end
  end
  return text == '' or string.find(msg, text, 1, true) ~= nil
end
for i, key in ipairs(KEYS) do
  if i > 1 and spent >= budget then
    break
  end
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'none' then
    out[i] = 0
  elseif kind ~= 'hash' then
    out[i] = kind
  elseif not matches(key) then
    out[i] = 1
    spent = spent + 1
  else
    local row = {}
    local values = redis.call('HMGET', key, unpack(small))
    for j = 1, n do
      local value = values[j] or ''
      row[#row + 1] = #value
      value = string.sub(value, 1, small_limit)
      row[#row + 1] = value
      spent = spent + #value
    end
    for j = 6 + n, #ARGV, 2 do
      local field, limit = ARGV[j], tonumber(ARGV[j + 1])
      local size = redis.call('HSTRLEN', key, field)
      local value = ''
      if size > 0 then
        value = redis.call('HGET', key, field)
        if size > limit then
          value = string.sub(value, 1, limit)
        end
      end
      row[#row + 1] = size
      row[#row + 1] = value
      spent = spent + #value
    end
    out[i] = row
  end
end
return out
