-- fence: the fencing token and the server clock, a helper of the library
-- after fields.lua (see internal/redisfn).

-- now is the TIME reply of the call running, read once per call: nil at
-- the start of each (the library's functions reset it; a script run by
-- EVALSHA starts with it nil). A Redis function's library keeps its
-- top-level locals from one call to the next, so a reading left here would
-- date the next call's tokens in the past (TestTokensFollowTheClock).
local now
-- time reads Redis server time once per call: the TIME reply, {seconds,
-- microseconds}, as strings.
local function time()
  if not now then now = redis.call('time') end
  return now
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
-- the counter was ahead of the clock. Older servers GET, then SET. (Set at
-- the first call: a library's top-level code runs without tonumber.)
local SETGET
local function new_token(fence, floor)
  if SETGET == nil then SETGET = (tonumber(redis.REDIS_VERSION_NUM) or 0) >= 0x070000 end
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
    error({err = 'lock: fencing counter ' .. fence .. ' is not a number'}) -- ends the script from inside a helper
  end
  if n + 1 <= f then
    if not SETGET then redis.call('set', fence, fs) end
    return f, fs
  end
  local ts = string.format('%.0f', n + 1)
  redis.call('set', fence, ts)
  return n + 1, ts
end
