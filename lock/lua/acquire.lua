-- acquire: take or re-enter the reentrant hash lock, take a lock granted to
-- this waiter (common.lua), or join the wait queue.
--
-- KEYS[1] lock hash    <prefix>{key}        field = owner, value = hold count
-- KEYS[2] fence        <prefix>{key}:fence  fencing counter, never expires
-- KEYS[3] queue        <prefix>{key}:q      list of waiters (common.lua), arrival order
-- KEYS[4] deadlines    <prefix>{key}:qt     zset waiter -> server-time ms after which it is skipped
-- ARGV[1] owner
-- ARGV[2] TTL in ms
-- ARGV[3] waiter: its queue entry (common.lua), or "" to make one attempt without queueing
-- ARGV[4] "1" fair (FIFO, no barging), "0" not
-- ARGV[5] waiter bound in ms: a waiter that does not call again within it is skipped
-- ARGV[6] wake-up channel prefix (unused; kept for the argument layout)
-- ARGV[7] "1" if the waiter may already be queued
--
-- Returns {1, token, fresh}: held (fresh = 1 for a new acquisition, or a
-- grant taken, 0 on re-entry), or {0, ms}: not held, wait at most ms before
-- trying again.
local lock, fence, queue, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, ttl, waiter = ARGV[1], ARGV[2], ARGV[3]
local fair, bound, queued = ARGV[4] == '1', tonumber(ARGV[5]), ARGV[7] == '1'

local function token()
  local t = redis.call('get', fence)
  if t and not tonumber(t) then return redis.error_reply('lock: fencing counter ' .. fence .. ' is not a number') end
  return tonumber(t or 0)
end

if redis.call('exists', lock) == 1 then
  local count = redis.call('hget', lock, owner)
  if count then
    if not tonumber(count) then return redis.error_reply('lock: hold count of ' .. lock .. ' is not a number') end
    local t = token()
    if type(t) == 'table' then return t end
    if waiter ~= '' and redis.call('hget', lock, GRANT) == waiter then
      -- A release granted the lock to this waiter: take it (its message was lost or late).
      redis.call('hdel', lock, GRANT)
      redis.call('pexpire', lock, ttl)
      return {1, t, 1}
    end
    redis.call('hincrby', lock, owner, 1)
    redis.call('pexpire', lock, ttl)
    return {1, t, 0}
  end
else
  local first
  if fair then first = head(queue, deadlines) end
  if not fair or not first or first == waiter then
    redis.call('hset', lock, owner, 1)
    redis.call('pexpire', lock, ttl)
    if queued then
      redis.call('lrem', queue, 1, waiter)
      redis.call('zrem', deadlines, waiter)
    end
    return {1, new_token(fence), 1}
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
-- The fencing counter goes with the answer: a grant made after this attempt
-- has a larger token, so the waiter can tell it from an older one.
local f = tonumber(redis.call('get', fence)) or 0
local pttl = redis.call('pttl', lock)
if pttl > 0 then return {0, pttl, f} end
if pttl == -1 then return {0, bound, f} end
-- Free, but a fair queue's head has its turn: wait at most until it would be skipped.
local first = head(queue, deadlines)
if not first then return {0, 1, f} end
return {0, math.max(1, tonumber(redis.call('zscore', deadlines, first)) - clock()), f}
