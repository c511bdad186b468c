-- force_release: delete the lock whoever holds it (operators only) and pass
-- it to the next live waiter (common.lua). The fencing counter is kept.
--
-- KEYS[1] lock hash    <prefix>{key}
-- KEYS[2] queue        <prefix>{key}:q
-- KEYS[3] deadlines    <prefix>{key}:qt
-- KEYS[4] fence        <prefix>{key}:fence
-- ARGV[1] wake-up channel prefix
--
-- Returns 1 if a lock was deleted, 0 if the key was free. Fails on a key of
-- another type (it is not a lock).
local lock, queue, deadlines, fence, prefix = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1]
local kind = redis.call('type', lock)['ok']
if kind == 'none' then return 0 end
if kind ~= 'hash' then return redis.error_reply('lock: ' .. lock .. ' holds a ' .. kind .. ', not a lock') end
pass(lock, fence, queue, deadlines, prefix) -- deletes the hash first
return 1
