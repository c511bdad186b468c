-- rw_acquire: take the read or the write side of a read-write lock, or say
-- how long to wait.
--
-- KEYS[1] hash      P rw:{key}        "w" writer owner, "wc" its count, "we" its
--                                     expiry (server ms), "t" its token, "wl" its
--                                     levels; "r:<owner>" a reader's count,
--                                     "rl:<owner>" its levels
-- KEYS[2] readers   P rw:{key}:r      zset: reader owner -> expiry (server ms)
-- KEYS[3] writers   P rw:{key}:ww     zset: waiting writer -> deadline (server ms)
-- KEYS[4] fence     P rw:{key}:fence  fencing counter (never deleted)
-- ARGV[1] "r" or "w"
-- ARGV[2] owner
-- ARGV[3] TTL ms
-- ARGV[4] this call's waiter id ("" for TryObtain: a writer that does not
--         wait does not hold readers back)
-- ARGV[5] waiter timeout ms
-- ARGV[6] this call's id (unique per call, no ','): the level it takes. The
--         same call sent again (its reply was lost and go-redis resent it)
--         finds its level and answers as the first run did, taking no
--         second level.
--
-- Levels: a hold's "wl" / "rl:<owner>" field lists the ids of the calls
-- that took its levels, ",<id>,<id>,", the fresh acquisition's id marked
-- "*<id>"; the count fields ("wc", "r:<owner>") stay the number of levels.
--
-- A level never shortens its hold: a re-entry (or a renewal, rw_renew.lua)
-- moves the writer's expiry "we" or the reader's score only later, never
-- earlier, and the keys' PEXPIRE only up (keep), since the hold's other
-- levels count on the later expiry.
--
-- Writer preference: a reader that holds nothing yet does not enter while
-- a writer waits, so a stream of readers cannot starve writers. The owner
-- holding the write side may take the read side (and keep it after
-- releasing the write side: a downgrade); a reader may not take the write
-- side (an upgrade would deadlock two readers): error RW_UPGRADE.
--
-- Returns {1, token, fresh} when held (token: the writer's fencing token;
-- for a read, the token of the last write), else {0, ms to wait}.
local h, readers, writers, fence = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local mode, owner, ttl, waiter, wto = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local req = ARGV[6] or ''
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Holds whose holder stopped renewing end here (their levels with them).
local we = tonumber(redis.call('hget', h, 'we') or 0)
if we > 0 and we <= now then
  redis.call('hdel', h, 'w', 'wc', 'we', 't', 'wl')
end
for _, o in ipairs(redis.call('zrangebyscore', readers, '-inf', now)) do
  redis.call('hdel', h, 'r:' .. o, 'rl:' .. o)
end
redis.call('zremrangebyscore', readers, '-inf', now)
redis.call('zremrangebyscore', writers, '-inf', now)

-- keep makes the keys outlive this hold: their expiry is at least ttl from
-- now, never earlier than it was. The readers zset gets one as soon as it
-- exists (-1: none yet), so that its expiry always covers every reader's
-- score (a renewal with a shorter TTL must not be the first to set it).
local function keep()
  local ms = redis.call('pttl', h)
  if ms < ttl then redis.call('pexpire', h, ttl) end
  ms = redis.call('pttl', readers)
  if ms ~= -2 and ms < ttl then redis.call('pexpire', readers, ttl) end
end

local function last_token()
  return tonumber(redis.call('get', fence) or 0) or 0
end

-- ran returns the fresh flag this very call answered if it ran before (its
-- level is in the levels field f), or nil.
local function ran(f)
  if req == '' then return nil end
  local levels = redis.call('hget', h, f)
  if not levels then return nil end
  if string.find(levels, ',*' .. req .. ',', 1, true) then return 1 end
  if string.find(levels, ',' .. req .. ',', 1, true) then return 0 end
  return nil
end

-- add records this call's level in the levels field f. (A re-entry of a
-- hold without the field, taken before levels were recorded, adds none:
-- its other levels are not listed.)
local function add(f, fresh)
  if req == '' then return end
  local levels = redis.call('hget', h, f)
  if not levels then
    if not fresh then return end
    levels = ','
  end
  local id = req
  if fresh then id = '*' .. req end
  redis.call('hset', h, f, levels .. id .. ',')
end

local function wait_ms()
  local d = -1
  local w = tonumber(redis.call('hget', h, 'we') or 0)
  if w > 0 then d = w - now end
  local first = redis.call('zrange', readers, 0, 0, 'withscores')
  if first[2] then
    local r = tonumber(first[2]) - now
    if d < 0 or r < d then d = r end
  end
  return d
end

local writer = redis.call('hget', h, 'w')
if mode == 'w' then
  if writer == owner then
    local again = ran('wl')
    if again then
      return {1, tonumber(redis.call('hget', h, 't')), again}
    end
    redis.call('hincrby', h, 'wc', 1)
    if we < now + ttl then redis.call('hset', h, 'we', now + ttl) end -- a level never shortens the hold
    add('wl', false)
    keep()
    return {1, tonumber(redis.call('hget', h, 't')), 0}
  end
  if redis.call('hexists', h, 'r:' .. owner) == 1 then
    return redis.error_reply('RW_UPGRADE a reader cannot take the write side')
  end
  if writer or redis.call('zcard', readers) > 0 then
    if waiter ~= '' then redis.call('zadd', writers, now + wto, waiter) end
    return {0, wait_ms()}
  end
  if waiter ~= '' then redis.call('zrem', writers, waiter) end
  local us = tonumber(t[1] .. string.sub('00000' .. t[2], -6))
  local token = math.max(last_token() + 1, us)
  redis.call('set', fence, string.format('%.0f', token))
  redis.call('hset', h, 'w', owner, 'wc', 1, 'we', now + ttl, 't', string.format('%.0f', token))
  add('wl', true)
  keep()
  return {1, token, 1}
end

-- mode == 'r'
local mine = redis.call('hexists', h, 'r:' .. owner) == 1
if mine then
  local again = ran('rl:' .. owner)
  if again then return {1, last_token(), again} end
elseif writer ~= owner then
  if writer or redis.call('zcard', writers) > 0 then
    return {0, wait_ms()}
  end
end
redis.call('hincrby', h, 'r:' .. owner, 1)
-- A level never shortens the hold: a re-entry keeps a later expiry.
local re = tonumber(redis.call('zscore', readers, owner) or 0)
if re < now + ttl then redis.call('zadd', readers, now + ttl, owner) end
add('rl:' .. owner, not mine)
keep()
local fresh = 1
if mine then fresh = 0 end
return {1, last_token(), fresh}
