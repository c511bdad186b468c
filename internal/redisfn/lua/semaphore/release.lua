-- release: give a permit back and hand it to the first waiter (grant.lua):
-- the permit passes from one holder to the next in this one script, with
-- no moment when it is free and no round trip of the waiter's in between.
--
-- KEYS[1] holders, KEYS[2] limit, KEYS[3] queue, KEYS[4] deadlines,
-- KEYS[5] tokens (see acquire.lua), KEYS[6] this release's marker
-- <prefix>{name}:r:<permit id>, KEYS[7] fence
-- ARGV[1] permit id
-- ARGV[2] N when KEYS[2] is unset
-- ARGV[3] the prefix of the wake-up channels: a waiter "<client>:<n>" is
--         told on ARGV[3] .. "<client>"
-- ARGV[4] how long the marker is kept, ms: a release sent again within it
--         (its reply was lost) answers 1 again, and grants nothing again
--
-- Returns 1 if the permit was held, 0 if not (expired, released). A
-- permit whose expiry has passed on the server's clock is not held, swept
-- or not: it is dropped with the others and the answer is 0.
local holders, limitk, queue, deadlines, tokens, marker, fence = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local t, now = clock()
local exp = redis.call('zscore', holders, ARGV[1])
local removed = 0
if exp and tonumber(exp) > now then
  redis.call('zrem', holders, ARGV[1])
  redis.call('hdel', tokens, ARGV[1])
  redis.call('set', marker, '1', 'px', ARGV[4])
  removed = 1
elseif not exp and redis.call('exists', marker) == 1 then
  return 1 -- released by this release's first run
end
expire(holders, tokens, now)
local limit = tonumber(redis.call('get', limitk) or ARGV[2]) or tonumber(ARGV[2])
grant(holders, fence, queue, deadlines, tokens, limit - redis.call('zcard', holders), t, now, ARGV[3])
return removed
