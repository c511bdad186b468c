-- raise_fence: raise a lock's fencing counter to at least a token, so that
-- the next fresh acquisition on this master gets a larger one.
--
-- KEYS[1] fence   <prefix>{key}:fence  fencing counter (lock's key schema)
-- ARGV[1] token   the Redlock token (the maximum over the quorum)
--
-- Returns the counter's value afterwards (at least ARGV[1]).
local t = tonumber(ARGV[1])
local cur = redis.call('get', KEYS[1])
if cur and not tonumber(cur) then
  return redis.error_reply('redlock: fencing counter ' .. KEYS[1] .. ' is not a number')
end
if cur and tonumber(cur) >= t then return tonumber(cur) end
redis.call('set', KEYS[1], ARGV[1])
return t
