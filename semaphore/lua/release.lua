-- release: give a permit back and wake the waiter that may now take one.
--
-- KEYS[1] holders, KEYS[2] limit, KEYS[3] queue, KEYS[4] deadlines,
-- KEYS[5] tokens (see acquire.lua), KEYS[6] this release's marker
-- <prefix>{name}:r:<permit id>
-- ARGV[1] permit id
-- ARGV[2] N when KEYS[2] is unset
-- ARGV[3] the prefix of the wake-up channels: a waiter "<client>:<n>" is
--         woken on ARGV[3] .. "<client>"
-- ARGV[4] how long the marker is kept, ms: a release sent again within it
--         (its reply was lost) answers 1 again
--
-- Wakes the waiter at the queue position of the last free permit (the
-- earlier ones were woken by earlier releases), one message to one
-- process. Returns 1 if the permit was held, 0 if not (expired, released).
local holders, limitk, queue, deadlines, tokens, marker = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local removed = redis.call('zrem', holders, ARGV[1])
if removed == 1 then
  redis.call('hdel', tokens, ARGV[1])
  redis.call('set', marker, '1', 'px', ARGV[4])
elseif redis.call('exists', marker) == 1 then
  return 1 -- released by this release's first run
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('zremrangebyscore', holders, '-inf', now)
local limit = tonumber(redis.call('get', limitk) or ARGV[2]) or tonumber(ARGV[2])
local free = limit - redis.call('zcard', holders)
if free > 0 then
  local ws = redis.call('lrange', queue, 0, free - 1)
  for _, w in ipairs(ws) do
    local d = tonumber(redis.call('zscore', deadlines, w) or 0)
    if d > now then
      local c = string.match(w, '^(.*):[^:]*$') or w
      redis.call('publish', ARGV[3] .. c, w)
    end
  end
end
return removed
