-- release.lua: gives a worker ID back if this process still holds it.
-- KEYS[1]  the worker ID's key
-- ARGV[1]  the holder record this process wrote when it leased the ID
-- Returns 1 when deleted, 0 when the key is gone or held by someone else.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
