-- force_release: delete the lock whoever holds it (operators only) and pass
-- it to the next live waiter (queue.lua). The fencing counter is kept.
-- Safe to resend: its answer is stored under a per-request marker, so the
-- same request sent again (its reply was lost) does not delete the hold of
-- the waiter it passed the lock to.
--
-- KEYS[1] lock hash    <prefix>{key}
-- KEYS[2] queue        <prefix>{key}:q
-- KEYS[3] deadlines    <prefix>{key}:qt
-- KEYS[4] fence        <prefix>{key}:fence
-- KEYS[5] metas        <prefix>{key}:qtm (waiter metadata), or absent
-- KEYS[6] marker       <prefix>{key}:r:<request id>, or absent (then KEYS[5] too)
-- ARGV[1] wake-up channel prefix
-- ARGV[2] marker TTL in ms (with KEYS[6])
--
-- Returns 1 if a lock was deleted, 0 if the key was free. Fails on a key of
-- another type (it is not a lock).
local lock, queue, deadlines, fence, metas, marker, prefix = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[1]
if marker then
  local done = redis.call('get', marker)
  if done then return tonumber(done) end
end
local kind = redis.call('type', lock)['ok']
local n = 0
if kind == 'hash' then
  pass(lock, fence, queue, deadlines, prefix, metas) -- deletes the hash first
  n = 1
elseif kind ~= 'none' then
  return redis.error_reply('lock: ' .. lock .. ' holds a ' .. kind .. ', not a lock')
end
if marker then redis.call('set', marker, n, 'px', ARGV[2]) end
return n
