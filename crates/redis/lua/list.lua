-- ARGV 4: state (S, R, L, D), 5: after score or '', 6: after member,
-- 7: limit. Returns {'OK', record...} in the state's order. The position
-- after a cursor is found by adding the cursor member temporarily and
-- asking its rank, which is exact for any mix of scores. Ready messages
-- parked by flow control (lua/flow.lua) are ready too: they are merged
-- in from their keys' parks.
local c = cfg()
if c then promote(c) end
local zs = ({S = K_SCHED, R = K_READY, L = K_LEASE, D = K_DEAD})[ARGV[4]]
local cut = ({S = 13, R = 17, L = 9, D = 9})[ARGV[4]]
local limit = tonumber(ARGV[7])

-- The first `limit` (member, score) pairs of zset `key` after the cursor.
local function after_cursor(key)
  local start = 0
  if ARGV[5] ~= '' then
    local added = redis.call('ZADD', key, 'NX', ARGV[5], ARGV[6])
    start = redis.call('ZRANK', key, ARGV[6]) + 1
    if added == 1 then redis.call('ZREM', key, ARGV[6]) ; start = start - 1 end
  end
  return redis.call('ZRANGE', key, start, start + limit - 1, 'WITHSCORES')
end

local members = {}
local page = after_cursor(zs)
for j = 1, #page, 2 do members[#members + 1] = {page[j], page[j + 1]} end
if ARGV[4] == 'R' and (tonumber(redis.call('HGET', K_FLOW, 'np')) or 0) > 0 then
  for _, key in ipairs(redis.call('HKEYS', K_KEYS)) do
    for _, park in ipairs({'pk:', 'ph:'}) do
      local parked = after_cursor(TAGP .. park .. key)
      for j = 1, #parked, 2 do members[#members + 1] = {parked[j], parked[j + 1]} end
    end
    local hp = redis.call('HGET', K_KHP, key)
    if hp then
      local m, pr = hp:sub(5), struct.unpack('>I4', hp)
      local after = ARGV[5] == '' or before(ARGV[5], ARGV[6], pr, m)
      if after then members[#members + 1] = {m, pr} end
    end
  end
  table.sort(members, function(a, b) return before(a[2], a[1], b[2], b[1]) end)
end
local out = {'OK'}
for i = 1, math.min(limit, #members) do
  local id = members[i][1]:sub(cut)
  append_record(out, id, load(id), ARGV[4])
end
return out
