-- acquire: take or re-enter the reentrant hash lock, or join its wait queue.
--
-- KEYS[1] lock hash    <prefix>{key}        field = owner, value = hold count
-- KEYS[2] fence        <prefix>{key}:fence  fencing counter, never expires
-- KEYS[3] queue        <prefix>{key}:q      list of waiter ids, arrival order
-- KEYS[4] deadlines    <prefix>{key}:qt     zset waiter id -> server-time ms after which it is skipped
-- ARGV[1] owner
-- ARGV[2] TTL in ms
-- ARGV[3] waiter id "<client id>:<n>", or "" to make one attempt without queueing
-- ARGV[4] "1" fair (FIFO, no barging), "0" not
-- ARGV[5] waiter bound in ms: a waiter that does not call again within it is skipped
-- ARGV[6] wake-up channel prefix: a waiter's channel is prefix .. client id
-- ARGV[7] "1" if the waiter may already be queued
--
-- Returns {1, token, fresh}: held (fresh = 1 for a new acquisition, 0 on
-- re-entry), or {0, ms}: not held, wait at most ms before trying again.
local lock, fence, queue, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, ttl, waiter = ARGV[1], ARGV[2], ARGV[3]
local fair, bound, prefix, queued = ARGV[4] == '1', tonumber(ARGV[5]), ARGV[6], ARGV[7] == '1'

local now
local function clock()
  if not now then
    local t = redis.call('time')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end

-- head drops waiters whose deadline passed (server time) and returns the first live one.
local function head()
  while true do
    local w = redis.call('lindex', queue, 0)
    if not w then return nil end
    local d = redis.call('zscore', deadlines, w)
    if d and tonumber(d) > clock() then return w end
    redis.call('lpop', queue)
    redis.call('zrem', deadlines, w)
  end
end

local function token()
  local t = redis.call('get', fence)
  if t and not tonumber(t) then return redis.error_reply('lock: fencing counter ' .. fence .. ' is not a number') end
  return tonumber(t or 0)
end

if redis.call('exists', lock) == 1 then
  local count = redis.call('hget', lock, owner)
  if count then
    if not tonumber(count) then return redis.error_reply('lock: hold count of ' .. lock .. ' is not a number') end
    redis.call('hincrby', lock, owner, 1)
    redis.call('pexpire', lock, ttl)
    local t = token()
    if type(t) == 'table' then return t end
    return {1, t, 0}
  end
else
  local first
  if fair then first = head() end
  if not fair or not first or first == waiter then
    redis.call('hset', lock, owner, 1)
    redis.call('pexpire', lock, ttl)
    if queued then
      redis.call('lrem', queue, 1, waiter)
      redis.call('zrem', deadlines, waiter)
    end
    local t = redis.call('incr', fence)
    if t == 1 then
      -- A new (or lost, e.g. after a restart without data) counter starts at the
      -- server's time in microseconds: larger than any token issued before,
      -- unless more than one acquisition per microsecond was ever made.
      local s = redis.call('time')
      t = tonumber(s[1]) * 1000000 + tonumber(s[2])
      redis.call('set', fence, t)
    end
    return {1, t, 1}
  end
end

-- Not obtained: queue (or refresh) the waiter, and say how long to wait.
if waiter ~= '' then
  if redis.call('zadd', deadlines, clock() + bound, waiter) == 1 then
    redis.call('rpush', queue, waiter)
  end
  redis.call('pexpire', queue, bound)
  redis.call('pexpire', deadlines, bound)
end
local pttl = redis.call('pttl', lock)
if pttl > 0 then return {0, pttl} end
if pttl == -1 then return {0, bound} end
-- Free, but a fair queue's head has its turn: wait at most until it would be skipped.
local first = head()
if not first then return {0, 1} end
return {0, math.max(1, tonumber(redis.call('zscore', deadlines, first)) - clock())}
