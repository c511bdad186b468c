-- force_release: delete the lock whoever holds it (operators only) and wake
-- the next live waiter. The fencing counter is kept.
--
-- KEYS[1] lock hash    <prefix>{key}
-- KEYS[2] queue        <prefix>{key}:q
-- KEYS[3] deadlines    <prefix>{key}:qt
-- ARGV[1] wake-up channel prefix
--
-- Returns 1 if a lock was deleted, 0 if the key was free. Fails on a key of
-- another type (it is not a lock).
local lock, queue, deadlines, prefix = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local kind = redis.call('type', lock)['ok']
if kind == 'none' then return 0 end
if kind ~= 'hash' then return redis.error_reply('lock: ' .. lock .. ' holds a ' .. kind .. ', not a lock') end
redis.call('del', lock)
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
return 1
