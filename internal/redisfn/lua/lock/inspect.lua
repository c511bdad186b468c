-- inspect: read a lock's whole state in one round trip (read-only).
--
-- KEYS[1] lock hash    <prefix>{key}
-- KEYS[2] fence        <prefix>{key}:fence
-- KEYS[3] queue        <prefix>{key}:q
-- KEYS[4] deadlines    <prefix>{key}:qt
-- KEYS[5] metas        <prefix>{key}:qtm, or absent
--
-- Returns {owners-and-counts (flat), pttl ms, fencing token or false,
-- waiter ids in order, their remaining ms (same order, -1 if unknown),
-- their holder metadata (same order, "" if none)}.
local lock, fence, queue, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local kind = redis.call('type', lock)['ok']
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('lock: ' .. lock .. ' holds a ' .. kind .. ', not a lock')
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local waiters = redis.call('lrange', queue, 0, -1)
local left, metas = {}, {}
for i, w in ipairs(waiters) do
  local d = redis.call('zscore', deadlines, w)
  if d then left[i] = tonumber(d) - now else left[i] = -1 end
  metas[i] = KEYS[5] and redis.call('hget', KEYS[5], w) or ''
end
return {redis.call('hgetall', lock), redis.call('pttl', lock), redis.call('get', fence), waiters, left, metas}
