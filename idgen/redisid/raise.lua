-- raise.lua: lift a counter past a floor, then add an increment, atomically.
-- Used when Redis answered a counter value at or below the highest value the
-- generator has already seen (Redis restarted from older data).
--
-- KEYS[1]  the counter (a string holding a decimal int64, or absent)
-- ARGV[1]  floor: a decimal int64; the counter is first set to
--          max(counter, floor)
-- ARGV[2]  increment: a decimal int64 >= 0, added with INCRBY afterwards
--
-- Returns the counter's new value as a decimal string (exact: Lua numbers are
-- doubles, so the value never passes through one).
-- Errors: REDISID_CORRUPT (the key is not a string or not an integer),
-- REDISID_OVERFLOW (the increment would pass the largest int64).

local key = KEYS[1]
local floor = ARGV[1]

local function isint(v)
  return v == '0' or string.match(v, '^%-?[1-9]%d*$') ~= nil
end

-- cmp compares two canonical decimal integers without converting them to
-- doubles: -1, 0 or 1.
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
if t ~= 'none' and t ~= 'string' then
  return redis.error_reply('REDISID_CORRUPT ' .. key .. ' holds a ' .. t .. ', not a counter')
end
local cur = redis.call('GET', key)
if cur and not isint(cur) then
  return redis.error_reply('REDISID_CORRUPT ' .. key .. ' is not an integer: ' .. cur)
end
if not cur or cmp(cur, floor) < 0 then
  redis.call('SET', key, floor)
end
local r = redis.pcall('INCRBY', key, ARGV[2])
if type(r) == 'table' and r['err'] then
  return redis.error_reply('REDISID_OVERFLOW ' .. key .. ': ' .. r['err'])
end
return redis.call('GET', key)
