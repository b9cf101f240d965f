-- ARGV 4: id, 5: lease id, 6 and 7: the attempts and the deferrals in a
-- row the caller read, 8 and 9: the attempts and deferrals after the
-- deferral, 10: 'D' (it dies) or the new deliver_at, 11: priority or '',
-- 12: the nack's error text (the record's last_error) or '' to keep it,
-- 13: the deferral's reason for its event (0 nack, 1 push_429, 2 push_503).
-- A nack with `defer: true` on a queue with flow: the deferral
-- (`FlowConfig::deferred`) was decided in Rust from the record read; this
-- applies it only if the message is still leased by that lease with those
-- counts (else {'CHG'}, and the caller reads again), and cools the key
-- (the queue, without a key) down until the new deliver_at; then the
-- message's successor, if any, takes effect (see `fail`).
-- Returns {'OK', new state, next_due, wakes}, {'NF'}, {'LM'}, {'CHG'} or
-- {'NOQ'}.
local c = cfg()
if not c then return {'NOQ'} end
promote(c)
local id, lid = ARGV[4], ARGV[5]
local bad, r = check_lease(id, lid)
if bad then return {bad} end
if r[AT] ~= tonumber(ARGV[6]) or r[DF] ~= tonumber(ARGV[7]) then return {'CHG'} end
if ARGV[11] ~= '' then r[PR] = tonumber(ARGV[11]) end
if ARGV[12] ~= '' then r[LE] = ARGV[12] end
redis.call('ZREM', K_LEASE, member(r, id))
r[LU], r[LI] = '', ''
r[AT], r[DF] = tonumber(ARGV[8]), tonumber(ARGV[9])
local st
if ARGV[10] == 'D' then
  to_dead(id, r, NOW)
  record(r, EV_DEAD, NOW, DIED_DEFERRALS)
  st = successor_redrive(id, r, NOW)
else
  local da = tonumber(ARGV[10])
  r[DA] = da
  record(r, EV_DEFERRED, NOW, da - NOW, tonumber(ARGV[13]) or 0)
  -- The cooldown is the deferred key's, whatever a successor brings.
  if r[KY] ~= '' then
    redis.call('ZADD', K_KCOOL, 'GT', s(da), r[KY])
    redis.call('HSET', K_KEYS, r[KY], 1)
  else
    local qc = tonumber(redis.call('HGET', K_FLOW, 'qc')) or 0
    redis.call('HSET', K_FLOW, 'qc', s(math.max(qc, da)))
  end
  successor_retry(id, r)
  st = place(id, r)
end
save(id, r)
return {'OK', st, next_due(c), wakes()}
