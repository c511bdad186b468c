-- time.lua: one ID of the TIME scheme from this node's clock, as a 4-tuple.
--
-- ID = ms << 22 | shard << 10 | seq, where ms = Redis TIME in milliseconds
-- since 1970 (41 bits), shard a logical shard (12 bits), seq a sequence within
-- the millisecond (10 bits). This node issues only the seq values congruent to
-- its index modulo the node count, so N nodes never issue the same ID.
--
-- KEYS[1]  the tag's sequence hash, e.g. coordkit:id:time:{order}:seq, fields
--          m<shard> (millisecond of the shard's last ID) and q<shard> (its seq)
-- KEYS[2]  the tag's last-millisecond mark, e.g. coordkit:id:time:{order}:last
-- KEYS[3]  the legacy sequence hash (redisid:time:{order}:seq), or KEYS[1]
-- KEYS[4]  the legacy mark (redisid:time:{order}:last), or KEYS[2]
--          The script uses KEYS[3] and KEYS[4] instead of KEYS[1] and
--          KEYS[2] while the legacy mark exists, so that processes of older
--          versions, which know only those, share the tag's state.
--          Every key carries the same hash tag, so they share a Cluster slot.
-- ARGV[1]  shard, 0..4095
-- ARGV[2]  this node's index, 0..count-1
-- ARGV[3]  node count, 1..1024
--
-- Returns {seconds, microseconds, shard, seq}.
-- Errors (the script never loops and never waits):
--   REDISID_BUSY <µs>       every seq of this millisecond is taken; retry in <µs>
--   REDISID_BACKWARDS <ms>  TIME is <ms> behind the tag's last millisecond
--   REDISID_CORRUPT ...     a key holds something else

local shard, index, count = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now = redis.call('TIME')
local sec, usec = tonumber(now[1]), tonumber(now[2])
local ms = sec * 1000 + math.floor(usec / 1000)

local seqkey, lastkey = KEYS[1], KEYS[2]
if KEYS[4] ~= KEYS[2] and redis.call('EXISTS', KEYS[4]) == 1 then
  seqkey, lastkey = KEYS[3], KEYS[4]
end

local t = redis.call('TYPE', lastkey)['ok']
if t ~= 'none' and t ~= 'string' then
  return redis.error_reply('REDISID_CORRUPT ' .. lastkey .. ' holds a ' .. t .. ', not a millisecond')
end
local last = redis.call('GET', lastkey)
if last then
  last = tonumber(last)
  if not last then
    return redis.error_reply('REDISID_CORRUPT ' .. lastkey .. ' is not a number')
  end
  if ms < last then
    return redis.error_reply('REDISID_BACKWARDS ' .. string.format('%.0f', last - ms))
  end
end

t = redis.call('TYPE', seqkey)['ok']
if t ~= 'none' and t ~= 'hash' then
  return redis.error_reply('REDISID_CORRUPT ' .. seqkey .. ' holds a ' .. t .. ', not a hash')
end
local mf, qf = 'm' .. shard, 'q' .. shard
local prev = redis.call('HMGET', seqkey, mf, qf)
local seq = index
if prev[1] then
  local pm, pq = tonumber(prev[1]), tonumber(prev[2])
  if not pm or not pq then
    return redis.error_reply('REDISID_CORRUPT ' .. seqkey .. ': fields of shard ' .. shard .. ' are not numbers')
  end
  if ms < pm then
    -- the mark was lost but the shard remembers a later millisecond
    return redis.error_reply('REDISID_BACKWARDS ' .. string.format('%.0f', pm - ms))
  end
  if ms == pm then
    seq = pq + count
    if seq > 1023 then
      return redis.error_reply('REDISID_BUSY ' .. (1000 - usec % 1000))
    end
  end
end

redis.call('HSET', seqkey, mf, string.format('%.0f', ms), qf, seq)
if not last or ms > last then
  redis.call('SET', lastkey, string.format('%.0f', ms))
end
return {sec, usec, shard, seq}
