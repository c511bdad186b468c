-- queue: the wait queue's helpers, after fence.lua (a helper of the
-- library: see internal/redisfn).
--
-- A queue entry names a waiter, in one of two forms:
--   "<client id>:<n>"                   woken: a release publishes it on its
--                                       client's channel, and it acquires;
--   "<client id>:<n>|<grant ms>|<owner>" granted: a release makes owner the
--                                       holder (TTL grant ms), records the
--                                       entry under the hash field GRANT and
--                                       publishes "<client id>:<n>|<token>".
-- A granted waiter holds the lock from that moment: it takes the lease from
-- the message, or, if the message is lost, from its next acquire.lua (which
-- finds its entry under GRANT), or gives it back in leave.lua.

-- clock returns Redis server time in ms.
local function clock()
  local t = time()
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- hold_token returns the fencing token of the hold in lock (a hash written
-- before TOKEN existed: the counter's value).
local function hold_token(lock, fence)
  local t = tonumber(redis.call('hget', lock, TOKEN))
  if t then return t end
  return tonumber(redis.call('get', fence)) or 0
end

-- head drops the waiters whose deadline passed (server time) and returns the
-- first live one, or nil. metas, if not nil, is the waiter-metadata hash
-- (<prefix>{key}:qtm, waiter entry -> holder metadata): a dropped waiter's
-- entry goes too.
local function head(queue, deadlines, metas)
  while true do
    local w = redis.call('lindex', queue, 0)
    if not w then return nil end
    local d = redis.call('zscore', deadlines, w)
    if d and tonumber(d) > clock() then return w end
    redis.call('lpop', queue)
    redis.call('zrem', deadlines, w)
    if metas then redis.call('hdel', metas, w) end
  end
end

-- dequeue takes a waiter that now holds the lock out of the queue (one
-- command when it was not queued) and returns whether it was queued. metas,
-- if not nil, is the waiter-metadata hash that holds the waiter's entry.
local function dequeue(queue, deadlines, waiter, metas)
  if waiter ~= '' and redis.call('zrem', deadlines, waiter) == 1 then
    redis.call('lrem', queue, 1, waiter)
    if metas then redis.call('hdel', metas, waiter) end
    return true
  end
  return false
end

-- pass frees the lock (deletes the hash) and gives it to the first live
-- waiter: a granted one holds it at once, a woken one is told to try. It
-- returns whether there was such a waiter. metas, if not nil, is the
-- waiter-metadata hash: a granted waiter's metadata moves from it to the
-- new hold (absent for callers of older versions: the hold has none).
local function pass(lock, fence, queue, deadlines, prefix, metas)
  local w = head(queue, deadlines, metas)
  local id, ms, owner
  if w then id, ms, owner = string.match(w, '^([^|]*)|(%d+)|(.*)$') end
  local t, ts
  if id then t, ts = new_token(fence) end -- first: a corrupted counter fails before any write
  redis.call('del', lock)
  if not w then return false end
  if not id then
    redis.call('publish', prefix .. string.match(w, '^(.*):'), w)
    return true
  end
  redis.call('lpop', queue)
  redis.call('zrem', deadlines, w)
  -- WAITING: others may be queued behind (the release reads the queue).
  -- Only a client with metadata ("m" first in its id, lock.WithHolderMeta)
  -- keeps any: the others' grants cost no read.
  local m = metas and string.byte(w, 1) == 109 and redis.call('hget', metas, w)
  if m then
    redis.call('hdel', metas, w)
    redis.call('hset', lock, owner, 1, GRANT, w, TOKEN, ts, LEVEL .. id, 1, WAITING, 1, META, m)
  else
    redis.call('hset', lock, owner, 1, GRANT, w, TOKEN, ts, LEVEL .. id, 1, WAITING, 1)
  end
  redis.call('pexpire', lock, ms)
  redis.call('publish', prefix .. string.match(id, '^(.*):'), id .. '|' .. ts)
  return true
end

