-- ARGV 4: state (S, R, L, D), 5: after score or '', 6: after member,
-- 7: limit. Returns {'OK', record...} in the state's order. The position
-- after a cursor is found by adding the cursor member temporarily and
-- asking its rank, which is exact for any mix of scores.
local c = cfg()
if c then promote(c) end
local zs = ({S = K_SCHED, R = K_READY, L = K_LEASE, D = K_DEAD})[ARGV[4]]
local cut = ({S = 13, R = 17, L = 9, D = 9})[ARGV[4]]
local start = 0
if ARGV[5] ~= '' then
  local added = redis.call('ZADD', zs, 'NX', ARGV[5], ARGV[6])
  start = redis.call('ZRANK', zs, ARGV[6]) + 1
  if added == 1 then redis.call('ZREM', zs, ARGV[6]) ; start = start - 1 end
end
local limit = tonumber(ARGV[7])
local out = {'OK'}
for _, m in ipairs(redis.call('ZRANGE', zs, start, start + limit - 1)) do
  local id = m:sub(cut)
  append_record(out, id, load(id), ARGV[4])
end
return out
