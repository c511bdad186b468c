-- grant: the helpers that hand freed permits over, which release.lua,
-- leave.lua and setlimit.lua call (a helper of the library: internal/redisfn).
--
-- A queue entry names a waiter and the permit it waits for:
--   "<client id>:<n>|<grant ms>"  granted: a release makes "<client id>:<n>"
--                                 a holder at once (expiry now + grant ms,
--                                 a fresh fencing token), takes the entry out
--                                 of the queue and publishes
--                                 "<client id>:<n>|<token>" on its client's
--                                 channel; the waiter holds the permit from
--                                 that moment (it takes it from the message,
--                                 or its next acquire.lua finds it held);
--   "<client id>:<n>"             woken (a client without grants): the
--                                 message is the entry; it takes the permit
--                                 itself.
-- A granted waiter that vanished holds its permit until the grant expires
-- (at most its waiter timeout), then it comes back like any expired permit.

-- clock returns the server's time: seconds, µs as Redis answers them, and ms.
local function clock()
  local t = redis.call('time')
  return t, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- expire drops the permits whose expiry has passed (their tokens with them).
local function expire(holders, tokens, now)
  local gone = redis.call('zrangebyscore', holders, '-inf', now)
  if #gone > 0 then
    redis.call('zremrangebyscore', holders, '-inf', now)
    redis.call('hdel', tokens, unpack(gone))
  end
end

-- new_token returns the next fencing token, as a string: above the counter
-- and the server's clock in µs, so that it exceeds every token handed out
-- even if the counter came back with an old value (see package lock's
-- fence.lua). It stores it in the counter.
local function new_token(fence, t)
  local us = tonumber(t[1] .. string.sub('00000' .. t[2], -6))
  local token = string.format('%.0f', math.max((tonumber(redis.call('get', fence) or 0) or 0) + 1, us))
  redis.call('set', fence, token)
  return token
end

-- grant hands up to free permits to the first live waiters in arrival order
-- (dead ones, past their deadline, are dropped), as described above.
local function grant(holders, fence, queue, deadlines, tokens, free, t, now, prefix)
  local pos = 0
  while free > 0 do
    local w = redis.call('lindex', queue, pos)
    if not w then return end
    local d = tonumber(redis.call('zscore', deadlines, w) or 0)
    if d <= now then
      redis.call('lrem', queue, 1, w)
      redis.call('zrem', deadlines, w)
    else
      local id, ms = string.match(w, '^(.*)|(%d+)$')
      local c = string.match(id or w, '^(.*):[^:]*$') or w
      if id then
        redis.call('lrem', queue, 1, w)
        redis.call('zrem', deadlines, w)
        local token = new_token(fence, t)
        redis.call('zadd', holders, now + tonumber(ms), id)
        redis.call('hset', tokens, id, token)
        redis.call('publish', prefix .. c, id .. '|' .. token)
      else
        redis.call('publish', prefix .. c, w)
        pos = pos + 1
      end
      free = free - 1
    end
  end
end
