-- common: put in front of acquire, release, handoff, leave and force_release
-- (scripts.go); the helpers they share.
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

local GRANT = '\0grant'

-- fail aborts the script with an error reply (from inside a helper, where
-- returning redis.error_reply would not end the script).
local function fail(msg) error({err = msg}) end

local now_s, now_us
-- time reads Redis server time once per script: seconds and microseconds.
local function time()
  if not now_s then
    local t = redis.call('time')
    now_s, now_us = tonumber(t[1]), tonumber(t[2])
  end
  return now_s, now_us
end

-- clock returns Redis server time in ms.
local function clock()
  local s, us = time()
  return s * 1000 + math.floor(us / 1000)
end

-- new_token takes the next fencing token: the larger of the counter + 1 and
-- the server's time in microseconds (or floor, if given: a caller that runs
-- the lock on several servers passes one clock reading to all of them, so
-- that their tokens agree), stored back in the counter. By induction every
-- token is at most that clock at the moment it is handed out, as long as no
-- two acquisitions of the key come within a microsecond (a script takes
-- longer). So when the counter comes back with an old value (a restart from
-- an older RDB, the lost tail of an everysec AOF, a failover to a lagging
-- replica) or not at all, the clock alone exceeds every token handed out
-- before, unless the clock went back.
--
-- On Redis 7 (redis.REDIS_VERSION_NUM appeared in 7.0) one SET ... GET
-- writes the clock and reads the counter; a second SET follows only when
-- the counter was ahead of the clock. Older servers GET, then SET.
local SETGET = (tonumber(redis.REDIS_VERSION_NUM) or 0) >= 0x070000
local function new_token(fence, floor)
  local f = tonumber(floor or 0) or 0
  if f <= 0 then
    local s, us = time()
    f = s * 1000000 + us
  end
  local fs = string.format('%.0f', f)
  local c
  if SETGET then
    c = redis.call('set', fence, fs, 'get') -- (a key of another type: an error, nothing written)
  else
    c = redis.call('get', fence)
  end
  local n = tonumber(c or 0)
  if not n then
    if SETGET then redis.call('set', fence, c) end -- put it back: the script fails having changed nothing
    fail('lock: fencing counter ' .. fence .. ' is not a number')
  end
  if n + 1 <= f then
    if not SETGET then redis.call('set', fence, fs) end
    return f, fs
  end
  local ts = string.format('%.0f', n + 1)
  redis.call('set', fence, ts)
  return n + 1, ts
end

-- Reserved hash fields (owners may not start with a NUL byte):
--   TOKEN          the fencing token of the hold (set when it is created;
--                  re-entry answers it, renew and release check it)
--   LEVEL .. id    one per hold level: the id of the call that took it, "1"
--                  if that was the hold's fresh acquisition, "0" re-entry.
--                  A call sent again (its reply was lost and go-redis or
--                  the caller retried) finds its level and takes no other.
--   PREV           the id of the level a hand-off released to make this hold
--   WAITING        "1": a waiter may be queued, so the outermost release
--                  looks at the queue (pass). Set by every waiter that
--                  queues while the hash exists, and on every hold made by
--                  a grant or taken by a waiter that was queued (others may
--                  be queued behind it); a release of a hash without it
--                  deletes the hash and reads no queue.
--                  (A waiter queued while no hash existed, after a holder's
--                  key expired, and not seen by the next holder's creation,
--                  tries again on its own timer, as after a lost message.)
local TOKEN, LEVEL, PREV, WAITING = '\0t', '\0l:', '\0p', '\0w'

-- hold_token returns the fencing token of the hold in lock (a hash written
-- before TOKEN existed: the counter's value).
local function hold_token(lock, fence)
  local t = tonumber(redis.call('hget', lock, TOKEN))
  if t then return t end
  return tonumber(redis.call('get', fence)) or 0
end

-- head drops the waiters whose deadline passed (server time) and returns the
-- first live one, or nil.
local function head(queue, deadlines)
  while true do
    local w = redis.call('lindex', queue, 0)
    if not w then return nil end
    local d = redis.call('zscore', deadlines, w)
    if d and tonumber(d) > clock() then return w end
    redis.call('lpop', queue)
    redis.call('zrem', deadlines, w)
  end
end

-- dequeue takes a waiter that now holds the lock out of the queue (one
-- command when it was not queued) and returns whether it was queued.
local function dequeue(queue, deadlines, waiter)
  if waiter ~= '' and redis.call('zrem', deadlines, waiter) == 1 then
    redis.call('lrem', queue, 1, waiter)
    return true
  end
  return false
end

-- pass frees the lock (deletes the hash) and gives it to the first live
-- waiter: a granted one holds it at once, a woken one is told to try. It
-- returns whether there was such a waiter.
local function pass(lock, fence, queue, deadlines, prefix)
  local w = head(queue, deadlines)
  local id, ms, owner
  if w then id, ms, owner = string.match(w, '^([^|]*)|(%d+)|(.*)$') end
  local t
  if id then t = new_token(fence) end -- first: a corrupted counter fails before any write
  redis.call('del', lock)
  if not w then return false end
  if not id then
    redis.call('publish', prefix .. string.match(w, '^(.*):'), w)
    return true
  end
  redis.call('lpop', queue)
  redis.call('zrem', deadlines, w)
  -- WAITING: others may be queued behind (the release reads the queue).
  redis.call('hset', lock, owner, 1, GRANT, w, TOKEN, string.format('%.0f', t), LEVEL .. id, 1, WAITING, 1)
  redis.call('pexpire', lock, ms)
  redis.call('publish', prefix .. string.match(id, '^(.*):'), id .. '|' .. string.format('%.0f', t))
  return true
end

