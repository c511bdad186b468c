-- renew: extend the lock's TTL if owner still holds it, in the same hold:
-- its expiry becomes at least TTL from now, and never earlier than it was.
--
-- KEYS[1] lock hash    <prefix>{key}
-- ARGV[1] owner
-- ARGV[2] TTL in ms
-- ARGV[3] the hold's fencing token, or ""/absent
-- ARGV[4] a level of the hold (acquire.lua's request id), or ""/absent
--
-- A hold of the same owner with another token, or without that level (this
-- one was lost, and the owner took the lock again, through this client or
-- another), is not renewed.
--
-- Returns 1 if renewed, 0 if owner does not hold the lock.
local token, level = ARGV[3] or '', ARGV[4] or ''
local v = redis.call('hmget', KEYS[1], ARGV[1], '\0t', '\0l:' .. level)
if not v[1] then return 0 end
if v[2] then -- a hold that records its token and levels (fence.lua)
  if token ~= '' and v[2] ~= token then return 0 end
  if level ~= '' and not v[3] then return 0 end
end
-- Never shorter: another level of the hold (a re-entry with a longer TTL)
-- may count on a later expiry than this renewal's.
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then redis.call('pexpire', KEYS[1], ARGV[2]) end
return 1
