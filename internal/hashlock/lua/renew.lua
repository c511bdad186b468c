-- renew: extend the lock's TTL if owner still holds it, in the same hold.
--
-- KEYS[1] lock hash    <prefix>{key}
-- ARGV[1] owner
-- ARGV[2] TTL in ms
-- ARGV[3] the hold's fencing token, or ""/absent
-- ARGV[4] a level of the hold (acquire.lua's request id), or ""/absent
-- ARGV[5] "1" if the hold was taken in the string form (compact.lua, read
--         first as a string), or ""/absent; either form is found either way
--
-- A hold of the same owner with another token, or without that level (this
-- one was lost, and the owner took the lock again, through this client or
-- another), is not renewed.
--
-- Returns 1 if renewed, 0 if owner does not hold the lock.
local token, level = ARGV[3] or '', ARGV[4] or ''
-- s: the string form's value (false: no key), v: the hash's fields; a read
-- of the wrong form is an error reply (pcall), and the other read follows.
local s, v
if ARGV[5] == '1' then
  s = redis.pcall('get', KEYS[1])
  if type(s) == 'table' then s = nil end
end
if s == nil then
  v = redis.pcall('hmget', KEYS[1], ARGV[1], '\0t', '\0l:' .. level)
  if v.err then s = redis.call('get', KEYS[1]) end
end
if s ~= nil then
  if not s then return 0 end
  local i = 1 -- (parse_hold in compact.lua, inline)
  if string.byte(s, 1) == 109 then
    local c = string.find(s, ':', 2, true)
    local n = c and tonumber(string.sub(s, 2, c - 1))
    i = n and c + n + 1 or 0
  end
  local a = i > 0 and string.find(s, '\0', i, true)
  local b = a and string.find(s, '\0', a + 1, true)
  if not b then return redis.error_reply('lock: ' .. KEYS[1] .. ' holds a string that is not a lock') end
  if string.sub(s, b + 1) ~= ARGV[1] then return 0 end
  if token ~= '' and string.sub(s, i, a - 1) ~= token then return 0 end
  if level ~= '' and string.sub(s, a + 1, b - 1) ~= level then return 0 end
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
if not v[1] then return 0 end
if v[2] then -- a hold that records its token and levels (fence.lua)
  if token ~= '' and v[2] ~= token then return 0 end
  if level ~= '' and not v[3] then return 0 end
end
redis.call('pexpire', KEYS[1], ARGV[2])
return 1
