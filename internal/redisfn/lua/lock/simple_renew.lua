-- simple_renew: compare-and-pexpire.
--
-- KEYS[1] lock         <prefix>{key}
-- ARGV[1] value (owner)
-- ARGV[2] TTL in ms
--
-- Returns 1 if renewed, 0 if the key was not held with value.
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
