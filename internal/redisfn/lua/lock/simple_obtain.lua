-- simple_obtain: the classic SET key value NX PX lock, plus a fencing token.
--
-- KEYS[1] lock         <prefix>simple:{key}        string: the holder's random value
-- KEYS[2] fence        <prefix>simple:{key}:fence  fencing counter, never expires
-- ARGV[1] value (owner): random, one per Obtain call
-- ARGV[2] TTL in ms
--
-- Returns {1, token} if set, {0, pttl ms} if held by anyone (the simple
-- lock is not reentrant). The same call sent again after its reply was lost
-- (go-redis retries) finds its own value and answers {1, token} again.
local c = redis.call('get', KEYS[2])
local n = tonumber(c or 0)
if not n then return redis.error_reply('lock: fencing counter ' .. KEYS[2] .. ' is not a number') end
local cur = redis.call('get', KEYS[1])
if cur == ARGV[1] then
  -- This very call ran before: nobody else can have taken a token since.
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, n}
end
if cur then return {0, redis.call('pttl', KEYS[1])} end
-- The next token, as new_token in fence.lua: the larger of the counter + 1
-- and the server's clock in µs, so it exceeds every token handed out even
-- when the counter came back with an old value (an older RDB, a lost AOF
-- tail, a lagging replica).
local s = redis.call('time')
local t = math.max(n + 1, tonumber(s[1]) * 1000000 + tonumber(s[2]))
redis.call('set', KEYS[2], string.format('%.0f', t))
redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
return {1, t}
