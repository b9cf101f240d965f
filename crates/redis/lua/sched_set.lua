-- Compare-and-set of one schedule record. ARGV 4: schedule id, 5: the
-- record JSON the caller read ('' = none), 6: the new record JSON ('' =
-- delete), 7: its wake time (the zset score: `ScheduleRecord::wake_at`,
-- '' = none), 8: the message a change cancels ('' = none): one written
-- ahead for a fire time after the change, deleted in the same step unless
-- a worker holds it (leased). Returns {'OK'} or {'OK', seq, wakes} (the
-- cancelled message's seq), {'CHG'} when the stored record is not the one
-- the caller read (another node changed or fired it: read again), or
-- {'NOQ'} when the shard has no config.
local c = cfg()
if not c then return {'NOQ'} end
-- Time is settled first, as every function acting on a message by id does:
-- a lease of the fire written ahead that ran out is failed before the
-- change judges whether a worker holds that message.
promote(c)
local sid = ARGV[4]
local cur = redis.call('HGET', K_SCHEDULES, sid) or ''
if cur ~= ARGV[5] then return {'CHG'} end
store_schedule(sid, ARGV[6], ARGV[7])
local ahead = ARGV[8] or ''
if ahead ~= '' then
  local r = load(ahead)
  if r and r[ST] ~= 'L' then
    unlink(ahead, r)
    redis.call('HDEL', K_MSG, ahead)
    key_removed(ahead, r)
    return {'OK', s(r[SK]), wakes()}
  end
end
return {'OK'}
