-- fresh: the new hold of the free lock, in acquire.lua where it takes one
-- (scripts.go puts this text in place of each "--#fresh" line). Not a
-- function: defining one that captures acquire's locals costs Redis time on
-- every call. others: waiters are queued behind this hold (it was a fair
-- queue's live head).
local t, ts = new_token(fence, floor) -- first: a corrupted counter fails before any write
if meta ~= '' then
  if req ~= '' then
    redis.call('hset', lock, owner, 1, TOKEN, ts, LEVEL .. req, 1, META, meta)
  else
    redis.call('hset', lock, owner, 1, TOKEN, ts, META, meta)
  end
elseif req ~= '' then
  redis.call('hset', lock, owner, 1, TOKEN, ts, LEVEL .. req, 1)
else
  redis.call('hset', lock, owner, 1, TOKEN, ts)
end
redis.call('pexpire', lock, ttl)
-- Out of the queue: queued by an earlier attempt, or by this very call if it
-- ran before (its reply lost) while the lock was held. A waiter that was
-- queued (or the head of a fair queue) leaves others behind it, who now wait
-- on this hold.
if waiter ~= '' and redis.call('zrem', deadlines, waiter) == 1 then
  redis.call('lrem', queue, 1, waiter)
  if metas then redis.call('hdel', metas, waiter) end
  others = true
end
if others then redis.call('hset', lock, WAITING, 1) end
return {1, t, 1}
