-- acquire: take or re-enter the reentrant hash lock, take a lock granted to
-- this waiter (queue.lua), or join the wait queue.
--
-- KEYS[1] lock hash    <prefix>{key}        field = owner, value = hold count; TOKEN, LEVEL fields (fence.lua)
-- KEYS[2] fence        <prefix>{key}:fence  fencing counter, never expires
-- KEYS[3] queue        <prefix>{key}:q      list of waiters (queue.lua), arrival order
-- KEYS[4] deadlines    <prefix>{key}:qt     zset waiter -> server-time ms after which it is skipped
-- KEYS[5] metas        <prefix>{key}:qtm    hash waiter -> holder metadata, or absent
-- ARGV[1] owner
-- ARGV[2] TTL in ms: a fresh hold's; a re-entry (or a grant taken) raises
--         the key's expiry to it, never lowers it (a level never shortens
--         the hold: the other levels' leases count on its expiry).
--         "-<ms>": the client's default, which a re-entry does not apply
-- ARGV[3] waiter: its queue entry (queue.lua), or "" to make one attempt without
--         queueing; "|<grant ms>|" stands for a granted-form entry made of
--         this call's request id (ARGV[6]) and owner: "<id>|<grant ms>|<owner>"
-- ARGV[4] "1" fair (FIFO, no barging), "0" not
-- ARGV[5] waiter bound in ms: a waiter that does not call again within it is skipped
-- ARGV[6] request id: unique per call; the same call sent again takes no
--         second level (""/absent: not retry-safe)
-- ARGV[7] token floor in µs (new_token), "" or absent: the server's clock
-- ARGV[8] holder metadata (META, fence.lua), "" or absent: none. Stored with
--         a fresh hold, and under the waiter's entry in KEYS[5] while it is
--         queued, so that a release that grants it the lock stores it too.
--
-- Returns {1, token, fresh}: held (token: the hold's fencing token; fresh =
-- 1 for a new acquisition or a grant taken, 0 on re-entry), or {0, ms,
-- counter}: not held, wait at most ms before trying again.
local lock, fence, queue, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, ttl, waiter = ARGV[1], ARGV[2], ARGV[3]
-- "-<ms>": the client's default TTL, not one the call chose. A fresh hold
-- takes it; a re-entry leaves the hold's expiry as it is.
local chosen = string.byte(ttl, 1) ~= 45 -- '-'
if not chosen then ttl = string.sub(ttl, 2) end
local fair, bound = ARGV[4] == '1', tonumber(ARGV[5])
local req, floor, meta = ARGV[6] or '', ARGV[7], ARGV[8] or ''
if string.byte(waiter, 1) == 124 then waiter = req .. waiter .. owner end -- '|': the entry's middle
-- metas: the waiter-metadata hash, when this call has metadata to keep there.
local metas = meta ~= '' and KEYS[5] or nil

local held = redis.call('exists', lock) == 1
-- The common case: a free lock outside fair mode.
if not held and not fair then
  return fresh(lock, fence, queue, deadlines, metas, owner, ttl, waiter, req, floor, meta, false)
end

local waiting = false -- the hash has WAITING
if held then
  local lvl = LEVEL .. req
  local v = redis.call('hmget', lock, owner, GRANT, lvl, WAITING)
  waiting = v[4] ~= false
  if v[1] then
    if not tonumber(v[1]) then return redis.error_reply('lock: hold count of ' .. lock .. ' is not a number') end
    local t = hold_token(lock, fence)
    if waiter ~= '' and v[2] == waiter then
      -- A release granted the lock to this waiter: take it (its message was lost or late).
      redis.call('hdel', lock, GRANT)
      if redis.call('pttl', lock) < tonumber(ttl) then redis.call('pexpire', lock, ttl) end
      return {1, t, 1}
    end
    -- Held by this owner: a waiter queued by an earlier attempt leaves the queue.
    dequeue(queue, deadlines, waiter, metas)
    if req ~= '' and v[3] then
      -- This very call ran before (its reply was lost): the same answer, no second level.
      if chosen and redis.call('pttl', lock) < tonumber(ttl) then redis.call('pexpire', lock, ttl) end
      return {1, t, tonumber(v[3])}
    end
    redis.call('hincrby', lock, owner, 1)
    if req ~= '' then redis.call('hset', lock, lvl, 0) end
    -- A level never shortens the hold: the key's expiry stays at least what
    -- the longest-lived level set (another level's lease counts on it).
    if chosen and redis.call('pttl', lock) < tonumber(ttl) then redis.call('pexpire', lock, ttl) end
    return {1, t, 0}
  end
else
  -- Fair: free, and this waiter's turn unless the queue's live head is another.
  local first = head(queue, deadlines, KEYS[5])
  if not first or first == waiter then
    return fresh(lock, fence, queue, deadlines, metas, owner, ttl, waiter, req, floor, meta, first ~= nil)
  end
end

-- Not obtained: queue (or refresh) the waiter, and say how long to wait.
if waiter ~= '' then
  if redis.call('zadd', deadlines, clock() + bound, waiter) == 1 then
    redis.call('rpush', queue, waiter)
  end
  redis.call('pexpire', queue, bound)
  redis.call('pexpire', deadlines, bound)
  if metas then -- every time: the hash may have expired while another client's waiters refreshed the queue
    redis.call('hset', metas, waiter, meta)
    redis.call('pexpire', metas, bound)
  end
  -- The holder's release must pass the lock on (no TTL change: HSET keeps it).
  if held and not waiting then redis.call('hset', lock, WAITING, 1) end
end
-- The fencing counter goes with the answer: a grant made after this attempt
-- has a larger token, so the waiter can tell it from an older one.
local f = tonumber(redis.call('get', fence)) or 0
local pttl = redis.call('pttl', lock)
if pttl > 0 then return {0, pttl, f} end
if pttl == -1 then return {0, bound, f} end
-- PTTL reads the clock, not the script's frozen time: a hold that EXISTS
-- saw can answer 0 in its last millisecond. It ends then.
if held then return {0, 1, f} end
-- Free, but a fair queue's head has its turn: wait at most until it would be skipped.
local first = head(queue, deadlines, KEYS[5])
if not first then return {0, 1, f} end
return {0, math.max(1, tonumber(redis.call('zscore', deadlines, first)) - clock()), f}
