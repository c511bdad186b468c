-- simple_obtain: the classic SET key value NX PX lock, plus a fencing token.
--
-- KEYS[1] lock         <prefix>{key}        string: the holder's random value
-- KEYS[2] fence        <prefix>{key}:fence  fencing counter, never expires
-- ARGV[1] value (owner)
-- ARGV[2] TTL in ms
--
-- Returns {1, token} if set, {0, pttl ms} if held by anyone (also by value:
-- the simple lock is not reentrant).
if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then
  local t = redis.call('incr', KEYS[2])
  if t == 1 then -- a new or lost counter starts at the server's time in µs
    local s = redis.call('time')
    t = tonumber(s[1]) * 1000000 + tonumber(s[2])
    redis.call('set', KEYS[2], t)
  end
  return {1, t}
end
return {0, redis.call('pttl', KEYS[1])}
