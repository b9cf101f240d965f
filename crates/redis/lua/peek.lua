-- ARGV 4: max. The first `max` ready members with their priorities, after
-- promotion; nothing when the queue is unknown or paused. Used to merge
-- the order of several shards before leasing from them.
local c = cfg()
if not c then return {} end
promote(c)
if paused(c) then return {} end
return redis.call('ZRANGE', K_READY, 0, tonumber(ARGV[4]) - 1, 'WITHSCORES')
