-- The protected resource's fenced write: refuse a token smaller than the
-- last accepted one for the key. An equal token is the same hold writing
-- again (a second write of a section, or a write from a re-entered level,
-- which carries the hold's token).
--
-- KEYS[1] the key's last accepted token
-- KEYS[2] the key's list of accepted writes, "hold token" in acceptance order
-- ARGV[1] the writer's fencing token
-- ARGV[2] the writer's hold id
--
-- Returns 1 if the write was accepted, 0 if refused.
local last = tonumber(redis.call('GET', KEYS[1]) or '-1')
local tok = tonumber(ARGV[1])
if tok < last then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[2] .. ' ' .. ARGV[1])
return 1
