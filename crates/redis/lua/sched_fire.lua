-- One firing step of a schedule, computed by the node (core's
-- `fire_step`; all the rules are Rust's): this function only compares and
-- writes. ARGV 4: schedule id, 5: the record JSON the step was computed
-- from, 6: the previous fire's message id whose liveness the step read
-- ('' = none read), 7: '1' when it was read live, else '0', 8/9: the
-- advanced record and its wake time (the zset score), 10..: the fire
-- messages (a fire written ahead last), groups of 11 as
-- `enqueue_items` takes them (an id that exists is left alone).
-- Returns {'OK', enqueue replies...}, {'CHG'} (the record, or the previous
-- message's liveness, changed since the node read them: another node
-- fired, a replace/pause/delete, an ack: nothing written, read again),
-- {'SEQ'} (fresh seqs needed; nothing written) or {'NOQ'}.
local c = cfg()
if not c then return {'NOQ'} end
local sid = ARGV[4]
if redis.call('HGET', K_SCHEDULES, sid) ~= ARGV[5] then return {'CHG'} end
if ARGV[6] ~= '' then
  local prev = load(ARGV[6])
  local live = '0'
  if prev and prev[ST] ~= 'D' then live = '1' end
  if live ~= ARGV[7] then return {'CHG'} end
end
local out = enqueue_items(c, 10)
if out[1] ~= 'OK' then return out end
store_schedule(sid, ARGV[8], ARGV[9])
return out
