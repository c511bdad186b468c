-- renew: extend the lock's TTL if owner still holds it.
--
-- KEYS[1] lock hash    <prefix>{key}
-- ARGV[1] owner
-- ARGV[2] TTL in ms
--
-- Returns 1 if renewed, 0 if owner does not hold the lock.
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0
