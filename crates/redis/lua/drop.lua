-- Deletes one shard of a queue: every message, retained record, index,
-- schedule and the config. O(messages and retained records in the shard).
-- Returns {'OK', deleted}.
local n = redis.call('HLEN', K_MSG)
local kept = redis.call('ZRANGE', K_RET, 0, -1)
for i = 1, #kept, 400 do
  local batch = {}
  for j = i, math.min(i + 399, #kept) do batch[#batch + 1] = rkey(kept[j]) end
  redis.call('DEL', unpack(batch))
end
for _, key in ipairs(redis.call('HKEYS', K_KEYS)) do
  redis.call('DEL', TAGP .. 'km:' .. key, TAGP .. 'pk:' .. key, TAGP .. 'ph:' .. key)
end
redis.call('DEL', K_FLOW, K_KEYS, K_KT, K_KL, K_KH, K_KHP, K_KCOOL, K_KWAIT, K_KIDLE)
redis.call('DEL', K_CFG, K_SCHED, K_READY, K_LEASE, K_DEAD, K_MSG, K_SCHEDULES, K_CURSORS, K_RET)
return {'OK', n}
