-- release: drop one hold level; at zero delete the lock and wake the first
-- live waiter (only it: its client's channel, the waiter id as message).
-- Safe to retry: the answer is kept under a per-request marker key.
--
-- KEYS[1] lock hash    <prefix>{key}
-- KEYS[2] queue        <prefix>{key}:q
-- KEYS[3] deadlines    <prefix>{key}:qt
-- KEYS[4] marker       <prefix>{key}:r:<request id>
-- ARGV[1] owner
-- ARGV[2] TTL in ms (set again when hold levels remain)
-- ARGV[3] marker TTL in ms
-- ARGV[4] wake-up channel prefix
--
-- Returns the hold levels left (0: freed), or -1 if owner did not hold the lock.
local lock, queue, deadlines, marker = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, ttl, markerTTL, prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local done = redis.call('get', marker)
if done then return tonumber(done) end

local left = -1
local count = redis.call('hget', lock, owner)
if count then
  count = tonumber(count)
  if not count then return redis.error_reply('lock: hold count of ' .. lock .. ' is not a number') end
  left = count - 1
  if left > 0 then
    redis.call('hset', lock, owner, left)
    redis.call('pexpire', lock, ttl)
  else
    left = 0
    redis.call('hdel', lock, owner)
    if redis.call('exists', lock) == 0 then
      local now
      while true do
        local w = redis.call('lindex', queue, 0)
        if not w then break end
        if not now then
          local t = redis.call('time')
          now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        end
        local d = redis.call('zscore', deadlines, w)
        if d and tonumber(d) > now then
          redis.call('publish', prefix .. string.match(w, '^(.*):'), w)
          break
        end
        redis.call('lpop', queue)
        redis.call('zrem', deadlines, w)
      end
    end
  end
end
redis.call('set', marker, left, 'px', markerTTL)
return left
