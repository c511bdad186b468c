-- simple_release: compare-and-delete, safe to resend.
--
-- KEYS[1] lock         <prefix>simple:{key}
-- KEYS[2] marker       <prefix>simple:{key}:r:<value>: this release's answer
-- ARGV[1] value (owner): random, one per Obtain call, so it names the hold
-- ARGV[2] marker TTL in ms (the release window)
--
-- Returns 1 if deleted (or deleted by this same release before: its reply
-- was lost and it was sent again), 0 if the key was not held with value.
-- The answer for a resend is stored under the marker, which names the
-- released hold; it is never inferred from the fencing counter (at token +
-- 1 it is also the next holder's token when the counter runs ahead of the
-- clock).
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  redis.call('set', KEYS[2], 1, 'px', ARGV[2])
  return 1
end
if redis.call('exists', KEYS[2]) == 1 then return 1 end
return 0
