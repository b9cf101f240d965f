-- Returns {'OK', scheduled, ready, leased, dead, ready_urgent, paused_until,
-- next_due} or {'NOQ'}.
local c = cfg()
if not c then return {'NOQ'} end
promote(c)
return {'OK', redis.call('ZCARD', K_SCHED), redis.call('ZCARD', K_READY),
  redis.call('ZCARD', K_LEASE), redis.call('ZCARD', K_DEAD),
  redis.call('ZCOUNT', K_READY, '-inf', '(1024'), c.pu, next_due(c)}
