-- rw_release: drop one level of a read or write hold; when the lock becomes
-- free for others, tell the waiters (one message on the key's channel:
-- every waiting reader may enter at once).
--
-- KEYS[1] hash, KEYS[2] readers (see rw_acquire.lua)
-- ARGV[1] "r" or "w"; ARGV[2] owner; ARGV[3] the key's channel
-- Returns the levels left (0: the hold ended), or -1 if not held.
local h, readers = KEYS[1], KEYS[2]
local mode, owner = ARGV[1], ARGV[2]
if mode == 'w' then
  if redis.call('hget', h, 'w') ~= owner then return -1 end
  local n = redis.call('hincrby', h, 'wc', -1)
  if n > 0 then return n end
  redis.call('hdel', h, 'w', 'wc', 'we', 't')
  redis.call('publish', ARGV[3], 'w')
  return 0
end
local f = 'r:' .. owner
if redis.call('hexists', h, f) == 0 then return -1 end
local n = redis.call('hincrby', h, f, -1)
if n > 0 then return n end
redis.call('hdel', h, f)
redis.call('zrem', readers, owner)
if redis.call('zcard', readers) == 0 then
  redis.call('publish', ARGV[3], 'r')
end
return 0
