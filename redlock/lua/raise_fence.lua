-- raise_fence: raise a lock's fencing counter to at least a token, so that
-- the next fresh acquisition on this master gets a larger one; and raise
-- the token recorded in the owner's hold on this master (its TOKEN field)
-- to it, so that a re-entry answered here, through any client, answers the
-- hold's token (the maximum over the quorum) and not this master's own.
--
-- KEYS[1] fence   <prefix>{key}:fence  fencing counter (lock's key schema)
-- KEYS[2] lock    <prefix>{key}        the lock hash, or absent
-- ARGV[1] token   the Redlock token (the maximum over the quorum)
-- ARGV[2] owner   the hold's owner (with KEYS[2])
--
-- Returns the counter's value afterwards (at least ARGV[1]).
local t = tonumber(ARGV[1])
local cur = redis.call('get', KEYS[1])
if cur and not tonumber(cur) then
  return redis.error_reply('redlock: fencing counter ' .. KEYS[1] .. ' is not a number')
end
if KEYS[2] and redis.call('hexists', KEYS[2], ARGV[2]) == 1 then
  local ht = tonumber(redis.call('hget', KEYS[2], '\0t'))
  if ht and ht < t then redis.call('hset', KEYS[2], '\0t', ARGV[1]) end
end
if cur and tonumber(cur) >= t then return tonumber(cur) end
redis.call('set', KEYS[1], ARGV[1])
return t
