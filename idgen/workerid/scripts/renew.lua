-- renew.lua: extends a worker-ID lease if this process still holds it.
-- KEYS[1]  the worker ID's key, e.g. coordkit:worker:{svc}:17
-- ARGV[1]  the holder record this process wrote when it leased the ID
-- ARGV[2]  TTL in milliseconds
-- Returns 1 when extended, 0 when the key is gone or held by someone else.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
