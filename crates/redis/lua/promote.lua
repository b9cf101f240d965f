-- Timer and sweep entry point. Returns {'OK', next_due, ready_count,
-- expired, due_schedules, wakes, deliver_at of each promoted message...} or
-- {'NOQ'}; due_schedules is the ids of schedules whose cursor is due,
-- space-separated ('' if none), which the node then fires.
local c = cfg()
if not c then return {'NOQ'} end
local fired, expired = promote(c)
-- Retained records whose window has passed are deleted: every node's
-- timer and sweep come here (their TTL is the backstop).
forget_retained()
local out = {'OK', next_due(c), redis.call('ZCARD', K_READY), expired,
  table.concat(due_schedules(100), ' '), wakes()}
for _, da in ipairs(fired) do table.insert(out, da) end
return out
