-- leave: a waiter gives up (its ctx ended, its client closed). If it had
-- been granted the lock and not taken it, the grant is given back; if the
-- lock is then free, it passes to the next live waiter, in case the leaving
-- one had been woken already.
--
-- KEYS[1] lock hash    <prefix>{key}
-- KEYS[2] queue        <prefix>{key}:q
-- KEYS[3] deadlines    <prefix>{key}:qt
-- KEYS[4] fence        <prefix>{key}:fence
-- KEYS[5] metas        <prefix>{key}:qtm (waiter metadata), or absent
-- ARGV[1] waiter (its queue entry)
-- ARGV[2] wake-up channel prefix
--
-- Returns 1 if the waiter was queued, 0 if not.
local lock, queue, deadlines, fence = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local waiter, prefix = ARGV[1], ARGV[2]
local was = redis.call('zrem', deadlines, waiter)
redis.call('lrem', queue, 0, waiter)
if KEYS[5] then redis.call('hdel', KEYS[5], waiter) end
if redis.call('hget', lock, GRANT) == waiter then
  -- Granted, never taken: drop the granted level.
  local id, owner = string.match(waiter, '^([^|]*)|%d+|(.*)$')
  local n = tonumber(redis.call('hget', lock, owner))
  if n and n > 1 then -- the owner re-entered through another call meanwhile
    redis.call('hincrby', lock, owner, -1)
    redis.call('hdel', lock, GRANT, LEVEL .. id)
  else
    redis.call('del', lock)
  end
end
if redis.call('exists', lock) == 0 then
  pass(lock, fence, queue, deadlines, prefix, KEYS[5])
end
return was
