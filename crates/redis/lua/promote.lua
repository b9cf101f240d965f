-- Timer and sweep entry point. Returns {'OK', next_due, ready_count,
-- expired, deliver_at of each promoted message...} or {'NOQ'}.
local c = cfg()
if not c then return {'NOQ'} end
local fired, expired = promote(c)
local out = {'OK', next_due(c), redis.call('ZCARD', K_READY), expired}
for _, da in ipairs(fired) do table.insert(out, da) end
return out
