-- setlimit: set the number of permits N, and wake the waiters that may now
-- take one (as release.lua does).
--
-- KEYS[1] holders, KEYS[2] limit, KEYS[3] queue, KEYS[4] deadlines
-- ARGV[1] N; ARGV[2] the prefix of the wake-up channels.
local holders, limitk, queue, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
redis.call('set', limitk, ARGV[1])
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('zremrangebyscore', holders, '-inf', now)
local free = tonumber(ARGV[1]) - redis.call('zcard', holders)
if free > 0 then
  for _, w in ipairs(redis.call('lrange', queue, 0, free - 1)) do
    local c = string.match(w, '^(.*):[^:]*$') or w
    redis.call('publish', ARGV[2] .. c, w)
  end
end
return 1
