-- Deletes one shard of a queue: every message, index, schedule and the
-- config. O(messages in the shard). Returns {'OK', deleted}.
local n = redis.call('HLEN', K_MSG)
for _, key in ipairs(redis.call('HKEYS', K_KEYS)) do
  redis.call('DEL', TAGP .. 'km:' .. key, TAGP .. 'pk:' .. key)
end
redis.call('DEL', K_FLOW, K_KEYS, K_KT, K_KL, K_KH, K_KHP, K_KCOOL, K_KWAIT, K_KIDLE)
redis.call('DEL', K_CFG, K_SCHED, K_READY, K_LEASE, K_DEAD, K_MSG, K_SCHEDULES, K_CURSORS)
return {'OK', n}
