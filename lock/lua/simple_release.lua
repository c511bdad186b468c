-- simple_release: compare-and-delete, safe to resend.
--
-- KEYS[1] lock         <prefix>simple:{key}
-- KEYS[2] fence        <prefix>simple:{key}:fence
-- ARGV[1] value (owner)
-- ARGV[2] the lease's fencing token
--
-- Returns 1 if deleted (or deleted by this same release before: its reply
-- was lost and it was sent again), 0 if the key was not held with value.
-- The answer for a resend is the fencing counter moved from the token to
-- token + 1 (no key to write and expire); a resend after another holder
-- took a token answers 0.
local tok = tonumber(ARGV[2])
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  redis.call('incr', KEYS[2]) -- token -> token + 1: the answer for a resend
  return 1
end
if tok and tonumber(redis.call('get', KEYS[2])) == tok + 1 then return 1 end
return 0
