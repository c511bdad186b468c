-- fresh: the new hold of the free lock, which acquire.lua takes (a helper
-- of the library, after queue.lua). Returns acquire's answer for it.
-- others: waiters are queued behind this hold (it was a fair queue's live
-- head); the arguments are acquire.lua's (KEYS and ARGV).
local function fresh(lock, fence, queue, deadlines, metas, owner, ttl, waiter, req, floor, meta, others)
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
  if dequeue(queue, deadlines, waiter, metas) then others = true end
  if others then redis.call('hset', lock, WAITING, 1) end
  return {1, t, 1}
end
