-- Compare-and-set of one schedule record. ARGV 4: schedule id, 5: the
-- record JSON the caller read ('' = none), 6: the new record JSON ('' =
-- delete), 7: its cursor (next_fire_at, '' = none). Returns {'OK'},
-- {'CHG'} when the stored record is not the one the caller read (another
-- node changed or fired it: read again), or {'NOQ'} when the shard has no
-- config.
if not cfg() then return {'NOQ'} end
local sid = ARGV[4]
local cur = redis.call('HGET', K_SCHEDULES, sid) or ''
if cur ~= ARGV[5] then return {'CHG'} end
store_schedule(sid, ARGV[6], ARGV[7])
return {'OK'}
