-- renew: extend a held permit.
--
-- KEYS[1] holders; KEYS[2] tokens; ARGV[1] permit id; ARGV[2] TTL ms.
-- Returns 1 if the permit was held (its expiry is now + TTL), 0 if not.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = redis.call('zscore', KEYS[1], ARGV[1])
if not exp or tonumber(exp) <= now then
  redis.call('zrem', KEYS[1], ARGV[1])
  redis.call('hdel', KEYS[2], ARGV[1])
  return 0
end
redis.call('zadd', KEYS[1], 'xx', now + tonumber(ARGV[2]), ARGV[1])
return 1
