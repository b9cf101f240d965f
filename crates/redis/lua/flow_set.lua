-- ARGV 4: '1' when the queue has flow, else '' (the rest ignored); 5..11:
-- qi, qb, ki, kb, qn, kn, od as lua/flow.lua describes them ('' = none).
-- Stores the queue's flow limits in its shard config; changed limits
-- apply to the messages waiting: each key with parked messages is looked
-- at again. Removing flow makes every parked message ready again and
-- forgets the buckets and cooldowns (as the reference model does).
-- Returns {'OK', wakes} or {'NOQ'}.
local c = cfg()
if not c then return {'NOQ'} end
local names = {'qi', 'qb', 'ki', 'kb', 'qn', 'kn', 'od'}
redis.call('HDEL', K_CFG, 'fl', unpack(names))
local keys = redis.call('HKEYS', K_KEYS)
-- The holders that waited for another holder (ph:<key>, lua/flow.lua)
-- are ready again, whatever the new limits: the lease loop looks at them
-- again.
for _, key in ipairs(keys) do
  local ph = TAGP .. 'ph:' .. key
  local later = redis.call('ZRANGE', ph, 0, -1, 'WITHSCORES')
  local back = {}
  for j = 1, #later, 2 do
    back[j], back[j + 1] = later[j + 1], later[j]
  end
  zadd_all(K_READY, back)
  redis.call('DEL', ph)
  if #later > 0 then redis.call('HINCRBY', K_FLOW, 'np', s(-#later / 2)) end
  WOKE = WOKE + #later / 2
end
if ARGV[4] == '1' then
  redis.call('HSET', K_CFG, 'fl', '1')
  for i, name in ipairs(names) do
    if ARGV[4 + i] ~= '' then redis.call('HSET', K_CFG, name, ARGV[4 + i]) end
  end
  FCFG_READ = false
  for _, key in ipairs(keys) do key_wake(key) end
  return {'OK', WOKE + 1}
end
FCFG_READ = false
for _, key in ipairs(keys) do
  local pk = TAGP .. 'pk:' .. key
  local parked = redis.call('ZRANGE', pk, 0, -1, 'WITHSCORES')
  local back = {}
  for j = 1, #parked, 2 do
    back[j], back[j + 1] = parked[j + 1], parked[j]
  end
  zadd_all(K_READY, back)
  local hp = redis.call('HGET', K_KHP, key)
  if hp then redis.call('ZADD', K_READY, s(struct.unpack('>I4', hp)), hp:sub(5)) end
  redis.call('DEL', pk)
  WOKE = WOKE + #parked / 2
end
redis.call('DEL', K_FLOW, K_KT, K_KHP, K_KCOOL, K_KWAIT, K_KIDLE)
for _, key in ipairs(keys) do key_idle(key) end
return {'OK', WOKE}
