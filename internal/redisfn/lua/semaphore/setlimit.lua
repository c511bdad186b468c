-- setlimit: set the number of permits N, and hand the permits a larger N
-- frees to the first waiters (grant.lua), as release.lua does.
--
-- KEYS[1] holders, KEYS[2] limit, KEYS[3] queue, KEYS[4] deadlines,
-- KEYS[5] tokens, KEYS[6] fence
-- ARGV[1] N; ARGV[2] the prefix of the wake-up channels.
local holders, limitk, queue, deadlines, tokens, fence = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
redis.call('set', limitk, ARGV[1])
local t, now = clock()
expire(holders, tokens, now)
grant(holders, fence, queue, deadlines, tokens, tonumber(ARGV[1]) - redis.call('zcard', holders), t, now, ARGV[2])
return 1
