-- handoff: the outermost release of a hold whose client has another local
-- waiter for the key: give the lock to that waiter's owner in the same step
-- (no moment where the lock is free, no Pub/Sub message, no acquisition
-- round trip). When another client's live waiter is queued for the key, it
-- releases instead, exactly as release.lua does at zero (delete and wake
-- that waiter), so local hand-offs never starve other clients.
--
-- KEYS[1] lock hash    <prefix>{key}
-- KEYS[2] fence        <prefix>{key}:fence
-- KEYS[3] queue        <prefix>{key}:q
-- KEYS[4] deadlines    <prefix>{key}:qt
-- ARGV[1] owner (the releasing one)
-- ARGV[2] new owner (the local waiter's)
-- ARGV[3] new owner's TTL in ms
-- ARGV[4] wake-up channel prefix
--
-- Returns {1, token}: handed over (token: the new owner's fencing token);
-- {0}: released (another client's waiter was woken); {-1}: owner did not
-- hold the lock; {-2}: owner holds more than one level (nothing done).
local lock, fence, queue, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, newOwner, ttl, prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local count = redis.call('hget', lock, owner)
if not count then return {-1} end
count = tonumber(count)
if not count then return redis.error_reply('lock: hold count of ' .. lock .. ' is not a number') end
if count > 1 then return {-2} end

redis.call('del', lock)
local now
while true do
  local w = redis.call('lindex', queue, 0)
  if not w then break end
  if not now then
    local t = redis.call('time')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local d = redis.call('zscore', deadlines, w)
  if d and tonumber(d) > now then
    redis.call('publish', prefix .. string.match(w, '^(.*):'), w)
    return {0}
  end
  redis.call('lpop', queue)
  redis.call('zrem', deadlines, w)
end

redis.call('hset', lock, newOwner, 1)
redis.call('pexpire', lock, ttl)
local t = redis.call('incr', fence)
if t == 1 then
  -- A new (or lost) counter starts at the server's time in microseconds, as
  -- in acquire.lua.
  local s = redis.call('time')
  t = tonumber(s[1]) * 1000000 + tonumber(s[2])
  redis.call('set', fence, t)
end
return {1, t}
