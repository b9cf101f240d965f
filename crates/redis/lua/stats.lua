-- Returns {'OK', scheduled, ready, leased, dead, ready_urgent, paused_until,
-- next_due, flow_keys, cooling_keys} or {'NOQ'}. Ready counts the parked
-- messages (lua/flow.lua) too.
local c = cfg()
if not c then return {'NOQ'} end
promote(c)
local parked = tonumber(redis.call('HGET', K_FLOW, 'np')) or 0
return {'OK', redis.call('ZCARD', K_SCHED), redis.call('ZCARD', K_READY) + parked,
  redis.call('ZCARD', K_LEASE), redis.call('ZCARD', K_DEAD),
  redis.call('ZCOUNT', K_READY, '-inf', '(1024'), c.pu, next_due(c),
  redis.call('HLEN', K_KEYS), redis.call('ZCOUNT', K_KCOOL, '(' .. s(NOW), '+inf')}
