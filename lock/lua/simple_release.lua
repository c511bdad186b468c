-- simple_release: compare-and-delete.
--
-- KEYS[1] lock         <prefix>{key}
-- ARGV[1] value (owner)
--
-- Returns 1 if deleted, 0 if the key was not held with value.
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
