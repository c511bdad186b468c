-- rw_renew: extend a read or write hold by its TTL.
--
-- KEYS[1] hash, KEYS[2] readers (see rw_acquire.lua)
-- ARGV[1] "r" or "w"; ARGV[2] owner; ARGV[3] TTL ms
-- Returns 1 if held, 0 if not (expired, taken over).
local h, readers = KEYS[1], KEYS[2]
local mode, owner, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if mode == 'w' then
  local we = tonumber(redis.call('hget', h, 'we') or 0)
  if redis.call('hget', h, 'w') ~= owner or we <= now then return 0 end
  redis.call('hset', h, 'we', now + ttl)
else
  local exp = redis.call('zscore', readers, owner)
  if not exp or tonumber(exp) <= now or redis.call('hexists', h, 'r:' .. owner) == 0 then return 0 end
  redis.call('zadd', readers, 'xx', now + ttl, owner)
  if redis.call('pttl', readers) < ttl then redis.call('pexpire', readers, ttl) end
end
if redis.call('pttl', h) < ttl then redis.call('pexpire', h, ttl) end
return 1
