-- leave: a waiter that gives up leaves the queue; a permit granted to it
-- and not taken (its ctx ended as the grant came, or an attempt that took
-- it lost its reply for good) goes back; free permits are handed to the
-- next waiters (grant.lua), in case the leaving one had been woken.
--
-- KEYS[1] holders, KEYS[2] limit, KEYS[3] queue, KEYS[4] deadlines,
-- KEYS[5] tokens, KEYS[6] fence
-- ARGV[1] the waiter's permit id; ARGV[2] N when KEYS[2] is unset; ARGV[3]
-- the prefix of the wake-up channels; ARGV[4] its queue entry (ARGV[1] for
-- a client without grants)
local holders, limitk, queue, deadlines, tokens, fence = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id, entry = ARGV[1], ARGV[4] or ARGV[1]
redis.call('lrem', queue, 1, entry)
redis.call('zrem', deadlines, entry)
if redis.call('zrem', holders, id) == 1 then
  redis.call('hdel', tokens, id)
end
local t, now = clock()
expire(holders, tokens, now)
local limit = tonumber(redis.call('get', limitk) or ARGV[2]) or tonumber(ARGV[2])
grant(holders, fence, queue, deadlines, tokens, limit - redis.call('zcard', holders), t, now, ARGV[3])
return 1
