-- handoff: the outermost release of a hold whose client has another local
-- waiter for the key: give the lock to that waiter's owner in the same step
-- (no moment where the lock is free, no Pub/Sub message, no acquisition
-- round trip). When another client's live waiter is queued for the key, it
-- releases instead, exactly as release.lua does at zero (delete and pass
-- the lock to that waiter), so local hand-offs never starve other clients.
--
-- Safe to retry: sent again after its reply was lost, it finds what it did
-- (the new owner's level, or its release marker) and answers the same.
--
-- KEYS[1] lock hash    <prefix>{key}
-- KEYS[2] fence        <prefix>{key}:fence
-- KEYS[3] queue        <prefix>{key}:q
-- KEYS[4] deadlines    <prefix>{key}:qt
-- KEYS[5] metas        <prefix>{key}:qtm (waiter metadata), or absent
-- KEYS[6] marker       <prefix>{key}:r:<request id>, or absent (then KEYS[5] too)
-- ARGV[1] owner (the releasing one)
-- ARGV[2] new owner (the local waiter's)
-- ARGV[3] new owner's TTL in ms
-- ARGV[4] wake-up channel prefix
-- ARGV[5] the releasing level's id (acquire.lua's request id), or ""/absent
-- ARGV[6] the new level's id (its call id), or ""/absent
-- ARGV[7] token floor in µs (new_token), or ""/absent
-- ARGV[8] marker TTL in ms (with KEYS[6])
-- ARGV[9] the new owner's holder metadata (META, fence.lua), or ""/absent
--
-- Returns {1, token}: handed over (token: the new owner's fencing token);
-- {0}: released (passed to another client's waiter); {-1}: owner did not
-- hold the lock; {-2}: owner holds more than one level (nothing done).
local lock, fence, queue, deadlines, metas, marker = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local owner, newOwner, ttl, prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local req, newReq, floor, markerTTL, meta = ARGV[5] or '', ARGV[6] or '', ARGV[7], ARGV[8], ARGV[9] or ''

-- ran reports what this very hand-off did if it ran before (its reply was
-- lost): {1, token} handed over, {0} released; nil if it did not run.
local function ran()
  if newReq ~= '' and redis.call('hexists', lock, LEVEL .. newReq) == 1 then
    return {1, hold_token(lock, fence)}
  end
  if marker and redis.call('exists', marker) == 1 then return {0} end -- passed to another client's waiter
end

if req == '' then
  -- No level to check: what it did first (owner may be newOwner).
  local r = ran()
  if r then return r end
end
local v = redis.call('hmget', lock, owner, LEVEL .. req, TOKEN, WAITING)
if not v[1] or (req ~= '' and not v[2] and v[3]) then
  -- Not held by this level: handed over or released by this very request
  -- before, or lost.
  return ran() or {-1}
end
local count = tonumber(v[1])
if not count then return redis.error_reply('lock: hold count of ' .. lock .. ' is not a number') end
if count > 1 then return {-2} end

-- The releasing lease is done either way; a Release of it sent again must
-- answer "released": a marker says so when the lock passed to another
-- client's waiter, the new hold's PREV field (the released level's id)
-- while the new owner holds it.
if not v[4] then
  redis.call('del', lock) -- without WAITING nobody is queued: no queue to read
elseif pass(lock, fence, queue, deadlines, prefix, metas) then -- (the hash is deleted either way)
  if marker then redis.call('set', marker, 0, 'px', markerTTL) end
  return {0}
end

local t, ts = new_token(fence, floor)
local fields = {newOwner, 1, TOKEN, ts, PREV, req}
if newReq ~= '' then fields[#fields + 1], fields[#fields + 2] = LEVEL .. newReq, 1 end
if meta ~= '' then fields[#fields + 1], fields[#fields + 2] = META, meta end
redis.call('hset', lock, unpack(fields))
redis.call('pexpire', lock, ttl)
return {1, t}
