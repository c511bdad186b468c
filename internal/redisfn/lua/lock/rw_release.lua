-- rw_release: drop one level of a read or write hold; when the lock becomes
-- free for others, tell the waiters (one message on the key's channel:
-- every waiting reader may enter at once).
--
-- Safe to resend: a release drops only its own level (the id of the call
-- that took it, in the hold's levels field: see rw_acquire.lua) and stores
-- its answer under a marker key for the release window, so that the same
-- release sent again (its reply was lost and go-redis resent it) answers as
-- the first run did: never a second level dropped, never "not held" for a
-- hold it released. A level not in the hold (the hold was lost, and maybe
-- taken again by the same owner) is not held. A hold without a levels
-- field (taken before levels were recorded) drops any level.
--
-- KEYS[1] hash, KEYS[2] readers (see rw_acquire.lua)
-- KEYS[3] marker    P rw:{key}:x:<level id>
-- ARGV[1] "r" or "w"; ARGV[2] owner; ARGV[3] the key's channel
-- ARGV[4] the level's id (rw_acquire.lua's ARGV[6]), or ""
-- ARGV[5] marker TTL ms (the release window)
-- Returns the levels left (0: the hold ended), or -1 if not held.
local h, readers, marker = KEYS[1], KEYS[2], KEYS[3]
local mode, owner, level, window = ARGV[1], ARGV[2], ARGV[4] or '', ARGV[5]

-- done returns the first run's answer if this release ran before, else -1.
local function done()
  local v = redis.call('get', marker)
  if v then return tonumber(v) end
  return -1
end

-- drop takes the level out of the levels field f; false if it is not there.
local function drop(f)
  local levels = redis.call('hget', h, f)
  if not levels or level == '' then return true end -- an old hold: any level
  for _, id in ipairs({',' .. level .. ',', ',*' .. level .. ','}) do
    local i = string.find(levels, id, 1, true)
    if i then
      redis.call('hset', h, f, string.sub(levels, 1, i) .. string.sub(levels, i + #id))
      return true
    end
  end
  return false
end

local function answer(n)
  if level ~= '' then redis.call('set', marker, n, 'px', window) end
  return n
end

if mode == 'w' then
  if redis.call('hget', h, 'w') ~= owner or not drop('wl') then return done() end
  local n = redis.call('hincrby', h, 'wc', -1)
  if n > 0 then return answer(n) end
  redis.call('hdel', h, 'w', 'wc', 'we', 't', 'wl')
  redis.call('publish', ARGV[3], 'w')
  return answer(0)
end
local f = 'r:' .. owner
if redis.call('hexists', h, f) == 0 or not drop('rl:' .. owner) then return done() end
local n = redis.call('hincrby', h, f, -1)
if n > 0 then return answer(n) end
redis.call('hdel', h, f, 'rl:' .. owner)
redis.call('zrem', readers, owner)
if redis.call('zcard', readers) == 0 then
  redis.call('publish', ARGV[3], 'r')
end
return answer(0)
