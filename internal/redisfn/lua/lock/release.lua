-- release: drop one hold level; at zero delete the lock and pass it to the
-- first live waiter (queue.lua: grant it, or wake that one waiter only) if
-- the hash says one may be queued (WAITING, fence.lua).
--
-- Safe to retry: a release stores its answer for the release window under
-- a marker key that names this release (KEYS[4]: the level's id for a
-- lease, the request's for a Node), so the same request sent again (its
-- reply was lost; go-redis or the caller retried) returns that answer
-- instead of dropping a second level, or reporting "not held" for a lock it
-- freed. The answer is never inferred from other state that can coincide
-- (the fencing counter at token + 1 is also the next holder's token when
-- the counter runs ahead of the clock). The marker is read only when the
-- owner's level is not found, so the common path reads one hash.
--
-- A release that names its level (ARGV[4], the id of the call that took it)
-- drops only that level: if the hash holds the owner but not that level (a
-- hold of the same owner that began after this one was lost), the level is
-- not held. Without it (Node callers that do not track levels) any level of
-- the owner is dropped.
--
-- KEYS[1] lock hash    <prefix>{key}
-- KEYS[2] queue        <prefix>{key}:q
-- KEYS[3] deadlines    <prefix>{key}:qt
-- KEYS[4] marker       <prefix>{key}:r:<level or request id>: this release's answer
-- KEYS[5] fence        <prefix>{key}:fence
-- KEYS[6] metas        <prefix>{key}:qtm (waiter metadata, queue.lua's pass), or absent
-- ARGV[1] owner
-- ARGV[2] marker TTL in ms
-- ARGV[3] wake-up channel prefix
-- ARGV[4] the level's id (acquire.lua's request id), or ""/absent
--
-- Returns the hold levels left (0: freed), or -1 if owner did not hold the lock.
local lock, queue, deadlines, marker, fence = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner, markerTTL, prefix = ARGV[1], ARGV[2], ARGV[3]
local req = ARGV[4] or ''

if req == '' then
  -- No level to find: the marker first, as the same request may find the
  -- owner still holding other levels.
  local done = redis.call('get', marker)
  if done then return tonumber(done) end
end
local lvl = LEVEL .. req
local v = redis.call('hmget', lock, owner, lvl, TOKEN, WAITING)
if not v[1] or (req ~= '' and not v[2] and v[3]) then
  -- Not held by this level: released before (the same request again), or lost.
  local done = redis.call('get', marker)
  if done then return tonumber(done) end
  if req ~= '' and redis.call('hget', lock, PREV) == req then return 0 end -- handed over by this level's release
  return -1
end
local count = tonumber(v[1])
if not count then return redis.error_reply('lock: hold count of ' .. lock .. ' is not a number') end
if count > 1 then
  -- The expiry stays: the levels left are renewed by their hold's watchdog,
  -- and setting this level's TTL could shorten what they count on.
  redis.call('hset', lock, owner, count - 1)
  if req ~= '' then redis.call('hdel', lock, lvl) end
  redis.call('set', marker, count - 1, 'px', markerTTL)
  return count - 1
end

-- The outermost release: the lock is free; pass it on (pass deletes the
-- hash first), and record the answer for a resend in the marker.
-- Without WAITING no waiter is queued: delete, and read no queue (the
-- common case).
if not v[4] then
  redis.call('del', lock)
  redis.call('set', marker, 0, 'px', markerTTL)
  return 0
end
pass(lock, fence, queue, deadlines, prefix, KEYS[6]) -- (deletes the hash either way)
redis.call('set', marker, 0, 'px', markerTTL)
return 0
