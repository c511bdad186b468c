-- rw_renew: extend a read or write hold by its TTL: its expiry becomes at
-- least TTL from now, never earlier than it was (another level of the hold
-- may count on a later one). Safe to resend: a second run sets the same
-- expiry again.
--
-- KEYS[1] hash, KEYS[2] readers (see rw_acquire.lua)
-- ARGV[1] "r" or "w"; ARGV[2] owner; ARGV[3] TTL ms
-- ARGV[4] a level of the hold (rw_acquire.lua's call id), or "": a hold of
--         the same owner without that level (this one was lost, and the
--         owner took that side again) is not renewed
-- Returns 1 if held, 0 if not (expired, taken over).
local h, readers = KEYS[1], KEYS[2]
local mode, owner, ttl, level = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] or ''
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- has reports whether the levels field f holds the level (a hold without
-- the field, taken before levels were recorded, holds any).
local function has(f)
  if level == '' then return true end
  local levels = redis.call('hget', h, f)
  if not levels then return true end
  return string.find(levels, ',' .. level .. ',', 1, true) ~= nil
    or string.find(levels, ',*' .. level .. ',', 1, true) ~= nil
end

if mode == 'w' then
  local we = tonumber(redis.call('hget', h, 'we') or 0)
  if redis.call('hget', h, 'w') ~= owner or we <= now or not has('wl') then return 0 end
  if we < now + ttl then redis.call('hset', h, 'we', now + ttl) end
else
  local exp = redis.call('zscore', readers, owner)
  if not exp or tonumber(exp) <= now or redis.call('hexists', h, 'r:' .. owner) == 0
    or not has('rl:' .. owner) then return 0 end
  if tonumber(exp) < now + ttl then redis.call('zadd', readers, 'xx', now + ttl, owner) end
  if redis.call('pttl', readers) < ttl then redis.call('pexpire', readers, ttl) end
end
if redis.call('pttl', h) < ttl then redis.call('pexpire', h, ttl) end
return 1
