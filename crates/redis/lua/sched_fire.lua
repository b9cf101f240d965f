-- One firing step of a schedule, planned by the node (the fire-time
-- arithmetic is Rust's). ARGV 4: schedule id, 5: the record JSON the plan
-- was computed from, 6: the previous fire's message id when `overlap:
-- skip` must check it ('' = no check), 7/8: the advanced record and cursor
-- when firing, 9/10: the record and cursor when the previous message is
-- live (the plan with its fire turned into a skip), 11..: the fire
-- messages, groups of 9 as `enqueue_items` takes them.
-- Returns {'OK', 'F', enqueue replies...} (fired), {'OK', 'S'} (skipped:
-- nothing enqueued), {'CHG'} (the record changed since it was read:
-- another node fired it, or a replace/pause/delete: no-op), {'SEQ'} (fresh
-- seqs needed; nothing written) or {'NOQ'}.
local c = cfg()
if not c then return {'NOQ'} end
local sid = ARGV[4]
if redis.call('HGET', K_SCHEDULES, sid) ~= ARGV[5] then return {'CHG'} end
if ARGV[6] ~= '' then
  local prev = load(ARGV[6])
  if prev and prev[ST] ~= 'D' then
    store_schedule(sid, ARGV[9], ARGV[10])
    return {'OK', 'S'}
  end
end
local out = enqueue_items(c, 11)
if out[1] ~= 'OK' then return out end
store_schedule(sid, ARGV[7], ARGV[8])
out[1] = 'F'
table.insert(out, 1, 'OK')
return out
