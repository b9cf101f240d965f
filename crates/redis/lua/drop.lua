-- Deletes one shard of a queue: every message, index, schedule and the
-- config. O(messages in the shard). Returns {'OK', deleted}.
local n = redis.call('HLEN', K_MSG)
redis.call('DEL', K_CFG, K_SCHED, K_READY, K_LEASE, K_DEAD, K_MSG, K_SCHEDULES, K_CURSORS)
return {'OK', n}
