-- release: drop one hold level; at zero delete the lock and pass it to the
-- first live waiter (common.lua: grant it, or wake that one waiter only).
-- Safe to retry: a release that leaves hold levels stores its answer under a
-- per-request marker key, so that the same request sent again (its reply was
-- lost) returns that answer instead of dropping a second level. The
-- outermost release writes no marker: sent again, it finds the owner gone
-- and answers -1, dropping nothing. So the common, non-reentrant path costs
-- no extra key write (and no key to expire later).
--
-- KEYS[1] lock hash    <prefix>{key}
-- KEYS[2] queue        <prefix>{key}:q
-- KEYS[3] deadlines    <prefix>{key}:qt
-- KEYS[4] marker       <prefix>{key}:r:<request id>
-- KEYS[5] fence        <prefix>{key}:fence
-- ARGV[1] owner
-- ARGV[2] TTL in ms (set again when hold levels remain)
-- ARGV[3] marker TTL in ms
-- ARGV[4] wake-up channel prefix
--
-- Returns the hold levels left (0: freed), or -1 if owner did not hold the lock.
local lock, queue, deadlines, marker, fence = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner, ttl, markerTTL, prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local done = redis.call('get', marker)
if done then return tonumber(done) end

local count = redis.call('hget', lock, owner)
if not count then return -1 end
count = tonumber(count)
if not count then return redis.error_reply('lock: hold count of ' .. lock .. ' is not a number') end
if count > 1 then
  redis.call('hset', lock, owner, count - 1)
  redis.call('pexpire', lock, ttl)
  redis.call('set', marker, count - 1, 'px', markerTTL)
  return count - 1
end

-- The outermost release: the lock is free; pass it on.
redis.call('del', lock)
pass(lock, fence, queue, deadlines, prefix)
return 0
