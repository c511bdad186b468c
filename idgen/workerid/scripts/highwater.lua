-- highwater.lua: raises a worker's high-water mark, never lowers it.
-- KEYS[1]  the mark's key, e.g. coordkit:worker:{svc}:hw:17
-- ARGV[1]  the new mark, Unix milliseconds (an integer)
-- Returns the stored mark after the call. A stored value that is not an
-- integer is an error, not silently replaced.
local cur = redis.call('GET', KEYS[1])
local new = tonumber(ARGV[1])
if cur then
  local n = tonumber(cur)
  if n == nil then
    return redis.error_reply('workerid: high-water mark at ' .. KEYS[1] .. ' is not a number: ' .. cur)
  end
  if n >= new then
    return n
  end
end
redis.call('SET', KEYS[1], ARGV[1])
return new
