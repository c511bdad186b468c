-- leave: a waiter gives up (its ctx ended). If the lock is free, the next
-- live waiter is woken, in case the leaving one had been woken already.
--
-- KEYS[1] lock hash    <prefix>{key}
-- KEYS[2] queue        <prefix>{key}:q
-- KEYS[3] deadlines    <prefix>{key}:qt
-- ARGV[1] waiter id
-- ARGV[2] wake-up channel prefix
--
-- Returns 1 if the waiter was queued, 0 if not.
local lock, queue, deadlines = KEYS[1], KEYS[2], KEYS[3]
local waiter, prefix = ARGV[1], ARGV[2]
local was = redis.call('zrem', deadlines, waiter)
redis.call('lrem', queue, 0, waiter)
if redis.call('exists', lock) == 0 then
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  while true do
    local w = redis.call('lindex', queue, 0)
    if not w then break end
    local d = redis.call('zscore', deadlines, w)
    if d and tonumber(d) > now then
      redis.call('publish', prefix .. string.match(w, '^(.*):'), w)
      break
    end
    redis.call('lpop', queue)
    redis.call('zrem', deadlines, w)
  end
end
return was
