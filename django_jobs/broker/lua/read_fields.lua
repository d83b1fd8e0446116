#!lua flags=no-writes
-- read_fields: some fields of task records, each cut to a length, and no more than a budget
-- of bytes in all, so that one admin or API request reads a bounded number of bytes out of
-- Redis whatever the records hold (a hand-written one may hold megabytes in one field).
--
-- KEYS      the task records (<ns>:{<q>}:t:<id>), of one queue
-- ARGV[1]   the budget: no key is read after the values returned reach this many bytes (the
--           first key is always read, so that a caller always moves on)
-- ARGV[2..] pairs of a field name and the longest value returned of it, in bytes
-- Returns   per key read, in order (fewer than KEYS when the budget ran out): 0 when the key
--           does not exist; its type (a string) when it is not a hash; else a list holding,
--           per field, its length in bytes and its value cut to its limit ('' when absent).
--           Fields over their limit are measured (HSTRLEN) before they are read, and only
--           their first bytes leave Redis.
local budget = tonumber(ARGV[1])
local spent = 0
local out = {}
for i, key in ipairs(KEYS) do
  if i > 1 and spent >= budget then
    break
  end
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'none' then
    out[i] = 0
  elseif kind ~= 'hash' then
    out[i] = kind
  else
    local row = {}
    for j = 2, #ARGV, 2 do
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
