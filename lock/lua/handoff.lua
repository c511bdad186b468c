-- handoff: the outermost release of a hold whose client has another local
-- waiter for the key: give the lock to that waiter's owner in the same step
-- (no moment where the lock is free, no Pub/Sub message, no acquisition
-- round trip). When another client's live waiter is queued for the key, it
-- releases instead, exactly as release.lua does at zero (delete and pass
-- the lock to that waiter), so local hand-offs never starve other clients.
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
-- {0}: released (passed to another client's waiter); {-1}: owner did not
-- hold the lock; {-2}: owner holds more than one level (nothing done).
local lock, fence, queue, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, newOwner, ttl, prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local count = redis.call('hget', lock, owner)
if not count then return {-1} end
count = tonumber(count)
if not count then return redis.error_reply('lock: hold count of ' .. lock .. ' is not a number') end
if count > 1 then return {-2} end

redis.call('del', lock)
if pass(lock, fence, queue, deadlines, prefix) then return {0} end

redis.call('hset', lock, newOwner, 1)
redis.call('pexpire', lock, ttl)
return {1, new_token(fence)}
