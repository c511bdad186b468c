-- compact: the lock's string form, after queue.lua (scripts.go). A fresh
-- hold of one level with no waiter behind it is a string (acquire.lua's
-- common path): "<token>\0<level id>\0<owner>", or with holder metadata
-- "m<bytes>:<metadata><token>\0<level id>\0<owner>", with the hold's TTL,
-- so that one SET takes the lock and one GET reads it. It stands for the
-- hash {owner = 1, TOKEN = token, LEVEL .. id = 1, META = metadata} (no
-- level field when the id is "", no META without metadata). release.lua and
-- renew.lua read it as it is (their copies of parse_hold are inline); every
-- other path turns it into that hash first (unstring), and then works on
-- the hash alone. (A token is digits, so "m" marks metadata; a level id
-- has no NUL byte, hashlock.Node checks; an owner and metadata may.)

-- parse_hold splits a string-form hold into its token, level id, owner
-- and metadata ("" if none), or returns nil if v is not one.
local function parse_hold(v)
  local i = 1 -- where the token starts
  if string.byte(v, 1) == 109 then -- 'm': metadata first
    local c = string.find(v, ':', 2, true)
    local n = c and tonumber(string.sub(v, 2, c - 1))
    if not n then return nil end
    i = c + n + 1
  end
  local a = string.find(v, '\0', i, true)
  if not a then return nil end
  local b = string.find(v, '\0', a + 1, true)
  if not b then return nil end
  local tok = string.sub(v, i, a - 1)
  if not tonumber(tok) then return nil end
  local meta = ''
  if i > 1 then meta = string.sub(v, string.find(v, ':', 2, true) + 1, i - 1) end
  return tok, string.sub(v, a + 1, b - 1), string.sub(v, b + 1), meta
end

-- unstring turns the string-form hold in lock into its hash, with the same
-- expiry. It returns whether lock is held afterwards (false: the key was
-- not a string, or the hold ended in this millisecond: PTTL reads the
-- clock, not the script's frozen time). A string that is not a hold fails
-- the script with nothing changed.
local function unstring(lock)
  local v = redis.pcall('get', lock)
  if type(v) ~= 'string' then return false end
  local tok, req, owner, meta = parse_hold(v)
  if not tok then error({err = 'lock: ' .. lock .. ' holds a string that is not a lock'}) end
  local pttl = redis.call('pttl', lock)
  redis.call('del', lock)
  if pttl == 0 then return false end
  local fields = {owner, 1, TOKEN, tok}
  if req ~= '' then fields[#fields + 1], fields[#fields + 2] = LEVEL .. req, 1 end
  if meta ~= '' then fields[#fields + 1], fields[#fields + 2] = META, meta end
  redis.call('hset', lock, unpack(fields))
  if pttl > 0 then redis.call('pexpire', lock, pttl) end
  return true
end
