-- stephash.lua: take the next value of a step hash, atomically.
--
-- The hash has four fields, all decimal integers, and may have been created
-- by hand with HSET:
--   offset   the first value
--   step     the distance between values (> 0)
--   current  the last value handed out
--   start    0 until the first value is handed out, then 1
-- start = 0: the value is offset; current := offset, start := 1.
-- otherwise: current := current + step; the value is current.
--
-- KEYS[1]  the hash
-- ARGV[1]  floor: the highest value the caller has already seen, as a decimal
--          int64, or "" for none. If the value would be at or below it (Redis
--          restarted from older data), current is first advanced by whole
--          steps past the floor, so the series keeps its residue modulo step.
--
-- Returns the value as a decimal string (never through a Lua double).
-- Errors: REDISID_NOHASH (no such key), REDISID_CORRUPT (not a hash, a field
-- missing or not an integer, step <= 0), REDISID_OVERFLOW (past int64).

local key = KEYS[1]
local floor = ARGV[1]

local function isint(v)
  return v == '0' or string.match(v, '^%-?[1-9]%d*$') ~= nil
end

local function cmp(a, b)
  local na, nb = string.sub(a, 1, 1) == '-', string.sub(b, 1, 1) == '-'
  if na ~= nb then
    if na then return -1 end
    return 1
  end
  local c = 0
  if #a ~= #b then
    if #a < #b then c = -1 else c = 1 end
  elseif a ~= b then
    if a < b then c = -1 else c = 1 end
  end
  if na then c = -c end
  return c
end

local t = redis.call('TYPE', key)['ok']
if t == 'none' then
  return redis.error_reply('REDISID_NOHASH ' .. key)
end
if t ~= 'hash' then
  return redis.error_reply('REDISID_CORRUPT ' .. key .. ' holds a ' .. t .. ', not a hash')
end

local names = {'offset', 'step', 'current', 'start'}
local vals = redis.call('HMGET', key, 'offset', 'step', 'current', 'start')
for i = 1, 4 do
  local v = vals[i]
  if not v then
    return redis.error_reply('REDISID_CORRUPT ' .. key .. ': field ' .. names[i] .. ' is missing')
  end
  if not isint(v) then
    return redis.error_reply('REDISID_CORRUPT ' .. key .. ': field ' .. names[i] .. ' is not an integer: ' .. v)
  end
end
local offset, step, start = vals[1], vals[2], vals[4]
if cmp(step, '0') <= 0 then
  return redis.error_reply('REDISID_CORRUPT ' .. key .. ': field step must be positive: ' .. step)
end

local function advance(by)
  local r = redis.pcall('HINCRBY', key, 'current', by)
  if type(r) == 'table' and r['err'] then
    return nil
  end
  return redis.call('HGET', key, 'current')
end

local value
if start == '0' then
  redis.call('HSET', key, 'current', offset, 'start', '1')
  value = offset
else
  value = advance(step)
  if not value then
    return redis.error_reply('REDISID_OVERFLOW ' .. key .. ': current + step passes int64')
  end
end

if floor ~= '' and cmp(value, floor) <= 0 then
  -- Jump close to the floor in one HINCRBY (the double arithmetic may be off
  -- by a little for huge values), then finish exactly, step by step.
  local k = math.floor((tonumber(floor) - tonumber(value)) / tonumber(step))
  if k >= 1 then
    value = advance(string.format('%.0f', k * tonumber(step)))
  end
  local guard = 0
  while value and cmp(value, floor) <= 0 do
    guard = guard + 1
    if guard > 100000 then
      return redis.error_reply('REDISID_CORRUPT ' .. key .. ': cannot step past floor ' .. floor)
    end
    value = advance(step)
  end
  if not value then
    return redis.error_reply('REDISID_OVERFLOW ' .. key .. ': current + step passes int64')
  end
end
return value
