-- leave: a waiter that gives up leaves the queue, and the waiters that may
-- take a permit it was offered are woken (as release.lua does).
--
-- KEYS[1] holders, KEYS[2] limit, KEYS[3] queue, KEYS[4] deadlines
-- ARGV[1] waiter id; ARGV[2] N when KEYS[2] is unset; ARGV[3] the prefix
-- of the wake-up channels.
local holders, limitk, queue, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
redis.call('lrem', queue, 1, ARGV[1])
redis.call('zrem', deadlines, ARGV[1])
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(redis.call('get', limitk) or ARGV[2]) or tonumber(ARGV[2])
local free = limit - redis.call('zcard', holders)
if free > 0 then
  for _, w in ipairs(redis.call('lrange', queue, 0, free - 1)) do
    local d = tonumber(redis.call('zscore', deadlines, w) or 0)
    if d > now then
      local c = string.match(w, '^(.*):[^:]*$') or w
      redis.call('publish', ARGV[3] .. c, w)
    end
  end
end
return 1
