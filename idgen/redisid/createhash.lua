-- createhash.lua: create a step hash unless the key exists (never clobbers).
--
-- KEYS[1]  the hash
-- ARGV[1]  offset (decimal int64): the first value
-- ARGV[2]  step (decimal int64 > 0)
--
-- Sets offset, step, current = offset and start = 0, exactly as a hash
-- created by hand with HSET. Returns 1 if it created the hash, 0 if the key
-- already existed (whatever it holds).

if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'offset', ARGV[1], 'step', ARGV[2], 'current', ARGV[1], 'start', '0')
return 1
