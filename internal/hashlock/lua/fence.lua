-- fence: first in every script that takes or passes the lock (scripts.go
-- puts it in front of acquire, release, handoff, leave and force_release,
-- and queue.lua after it); the fencing token, the server clock and the
-- hash's reserved fields.

local GRANT = '\0grant'

-- fail aborts the script with an error reply (from inside a helper, where
-- returning redis.error_reply would not end the script).
local function fail(msg) error({err = msg}) end

local now
-- time reads Redis server time once per script: the TIME reply, {seconds,
-- microseconds}, as strings.
local function time()
  if not now then now = redis.call('time') end
  return now
end

-- clock returns Redis server time in ms.
local function clock()
  local t = time()
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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
  local f, fs = tonumber(floor or 0) or 0
  if f > 0 then
    fs = string.format('%.0f', f)
  else
    -- The clock in µs as a decimal string, without string.format (it costs
    -- more than the rest of this function): seconds, then the microseconds
    -- zero-padded to 6 digits.
    local t = time()
    fs = t[1] .. string.sub('00000' .. t[2], -6)
    f = tonumber(fs)
  end
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
--   META           the holder's metadata (lock.WithHolderMeta): set with
--                  the hold by a fresh acquisition, a hand-off, or a grant
--                  (from the waiter's entry in the waiter-metadata hash)
--   WAITING        "1": a waiter may be queued, so the outermost release
--                  looks at the queue (pass). Set by every waiter that
--                  queues while the hash exists, and on every hold made by
--                  a grant or taken by a waiter that was queued (others may
--                  be queued behind it); a release of a hash without it
--                  deletes the hash and reads no queue.
--                  (A waiter queued while no hash existed, after a holder's
--                  key expired, and not seen by the next holder's creation,
--                  tries again on its own timer, as after a lost message.)
local TOKEN, LEVEL, PREV, WAITING, META = '\0t', '\0l:', '\0p', '\0w', '\0m'

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

