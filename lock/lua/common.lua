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

local now_ms
-- clock returns Redis server time in ms (read once per script).
local function clock()
  if not now_ms then
    local t = redis.call('time')
    now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now_ms
end

-- new_token increments the fencing counter. A new (or lost, e.g. after a
-- restart without data) counter starts at the server's time in microseconds:
-- larger than any token issued before, unless more than one acquisition per
-- microsecond was ever made.
local function new_token(fence)
  local t = redis.call('incr', fence)
  if t == 1 then
    local s = redis.call('time')
    t = tonumber(s[1]) * 1000000 + tonumber(s[2])
    redis.call('set', fence, t)
  end
  return t
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

-- pass gives a lock that was just freed to the first live waiter: a granted
-- one holds it at once, a woken one is told to try. It returns whether
-- there was such a waiter.
local function pass(lock, fence, queue, deadlines, prefix)
  local w = head(queue, deadlines)
  if not w then return false end
  local id, ms, owner = string.match(w, '^([^|]*)|(%d+)|(.*)$')
  if not id then
    redis.call('publish', prefix .. string.match(w, '^(.*):'), w)
    return true
  end
  local t = new_token(fence) -- first: a corrupted counter fails before any grant
  redis.call('lpop', queue)
  redis.call('zrem', deadlines, w)
  redis.call('hset', lock, owner, 1, GRANT, w)
  redis.call('pexpire', lock, ms)
  redis.call('publish', prefix .. string.match(id, '^(.*):'), id .. '|' .. string.format('%.0f', t))
  return true
end

