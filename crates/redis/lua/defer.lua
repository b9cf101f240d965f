-- ARGV 4: id, 5: lease id, 6: the deferrals in a row the caller read,
-- 7: 'D' (the deferral rule says dead) or the new deliver_at, 8: priority
-- or ''. A nack with `defer: true` on a queue with flow: the rule
-- (`FlowConfig::defer`) was applied in Rust to the record read; this
-- applies its verdict only if the message is still leased by that lease
-- with those deferrals (else {'CHG'}, and the caller reads again). The
-- attempt is given back, the deferrals count one more, and the key (the
-- queue, without a key) cools down until the new deliver_at.
-- Returns {'OK', new state, next_due, wakes}, {'NF'}, {'LM'}, {'CHG'} or
-- {'NOQ'}.
local c = cfg()
if not c then return {'NOQ'} end
promote(c)
local id, lid = ARGV[4], ARGV[5]
local bad, r = check_lease(id, lid)
if bad then return {bad} end
if r[DF] ~= tonumber(ARGV[6]) then return {'CHG'} end
if ARGV[8] ~= '' then r[PR] = tonumber(ARGV[8]) end
redis.call('ZREM', K_LEASE, member(r, id))
r[LU], r[LI] = '', ''
r[AT] = math.max(r[AT] - 1, 0)
r[DF] = r[DF] + 1
local st
if ARGV[7] == 'D' then
  to_dead(id, r, NOW)
  st = 'D'
else
  local da = tonumber(ARGV[7])
  r[DA] = da
  st = place(id, r)
  if r[KY] ~= '' then
    redis.call('ZADD', K_KCOOL, 'GT', s(da), r[KY])
    redis.call('HSET', K_KEYS, r[KY], 1)
  else
    local qc = tonumber(redis.call('HGET', K_FLOW, 'qc')) or 0
    redis.call('HSET', K_FLOW, 'qc', s(math.max(qc, da)))
  end
end
save(id, r)
return {'OK', st, next_due(c), wakes()}
