-- acquire: take a permit of a counting semaphore, take the permit a release
-- granted this waiter (grant.lua), or queue for one.
--
-- KEYS[1] holders    <prefix>{name}        zset: permit id -> expiry (server ms)
-- KEYS[2] fence      <prefix>{name}:fence  fencing counter (never deleted)
-- KEYS[3] limit      <prefix>{name}:limit  the number of permits N (optional)
-- KEYS[4] queue      <prefix>{name}:q      waiters in arrival order (grant.lua)
-- KEYS[5] deadlines  <prefix>{name}:qt     zset: waiter -> deadline (server ms)
-- KEYS[6] tokens     <prefix>{name}:tok    hash: permit id -> its fencing token
-- ARGV[1] permit id (also names the waiter while it waits)
-- ARGV[2] TTL ms
-- ARGV[3] N when KEYS[3] is unset
-- ARGV[4] "1" to queue when no permit is free (Acquire), "0" not (TryAcquire)
-- ARGV[5] waiter timeout ms: a queued waiter that does not call again
--         within it is skipped
-- ARGV[6] grant ms: how long a permit granted to the queued waiter is held
--         for it (its queue entry is "<id>|<grant ms>"); "" or absent: the
--         waiter is only woken (entry "<id>")
--
-- Expired permits come back first; dead waiters are dropped from the
-- queue. Waiters are served in arrival order: a release grants its permit
-- to the first waiter; with F permits free otherwise (expired ones), the
-- first F waiters (and a caller not queued only when fewer than F wait)
-- may take one. Returns {1, token} when the permit is held (taken now,
-- granted, or taken by this very call before: its reply was lost and the
-- command sent again), else {0, ms until the first permit expires (-1 if
-- none is held), 1 if queued, the fencing counter}: a grant made after
-- this answer has a larger token.
local holders, fence, limitk, queue, deadlines, tokens = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id, ttl, deflimit, wait, wto = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1', tonumber(ARGV[5])
local entry = id
if (ARGV[6] or '') ~= '' then entry = id .. '|' .. ARGV[6] end

local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- A permit granted to this waiter, or taken by this call already (its
-- reply was lost and the command sent again): the same permit, the same
-- token, held for the TTL from now.
local mine = redis.call('zscore', holders, id)
if mine and tonumber(mine) > now then
  redis.call('zadd', holders, now + ttl, id)
  return {1, tonumber(redis.call('hget', tokens, id) or 0)}
end

-- Expired permits come back (their tokens go with them).
local gone = redis.call('zrangebyscore', holders, '-inf', now)
if #gone > 0 then
  redis.call('zremrangebyscore', holders, '-inf', now)
  redis.call('hdel', tokens, unpack(gone))
end
local dead = redis.call('zrangebyscore', deadlines, '-inf', now)
for _, w in ipairs(dead) do
  redis.call('lrem', queue, 1, w)
  redis.call('zrem', deadlines, w)
end

local limit = tonumber(redis.call('get', limitk) or deflimit) or deflimit
local free = limit - redis.call('zcard', holders)
local pos = redis.call('lpos', queue, entry)
local ahead
if pos then ahead = pos else ahead = redis.call('llen', queue) end

if free > 0 and ahead < free then
  redis.call('zadd', holders, now + ttl, id)
  if pos then
    redis.call('lrem', queue, 1, entry)
    redis.call('zrem', deadlines, entry)
  end
  -- The next fencing token: above the counter and the server's clock in
  -- µs, so that it exceeds every token handed out even if the counter came
  -- back with an old value (see package lock's fence.lua).
  local us = tonumber(t[1] .. string.sub('00000' .. t[2], -6))
  local token = math.max((tonumber(redis.call('get', fence) or 0) or 0) + 1, us)
  redis.call('set', fence, string.format('%.0f', token))
  redis.call('hset', tokens, id, string.format('%.0f', token))
  return {1, token}
end

local queued = 0
if wait then
  if not pos then redis.call('rpush', queue, entry) end
  redis.call('zadd', deadlines, now + wto, entry)
  queued = 1
end
local first = redis.call('zrange', holders, 0, 0, 'withscores')
local left = -1
if first[2] then left = tonumber(first[2]) - now end
return {0, left, queued, tonumber(redis.call('get', fence) or 0) or 0}
