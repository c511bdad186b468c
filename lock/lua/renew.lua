-- renew: extend the lock's TTL if owner still holds it, in the same hold.
--
-- KEYS[1] lock hash    <prefix>{key}
-- ARGV[1] owner
-- ARGV[2] TTL in ms
-- ARGV[3] the hold's fencing token, or ""/absent: a hold of the same owner
--         with another token (this one was lost, and the owner took the lock
--         again, through this client or another) is not renewed
--
-- Returns 1 if renewed, 0 if owner does not hold the lock.
local v = redis.call('hmget', KEYS[1], ARGV[1], '\0t')
if not v[1] then return 0 end
local token = ARGV[3] or ''
if token ~= '' and v[2] and v[2] ~= token then return 0 end
redis.call('pexpire', KEYS[1], ARGV[2])
return 1
