-- ARGV 4: id, 5: lease id, 6: priority or ''. Returns {'OK', wakes, state,
-- deliver_at}, {'NF'}, {'LM'}: the state is 'D', or, when the message had a
-- successor, the state the successor took its place in ('R' or 'S').
local c = cfg()
if c then promote(c) end
local id, lid = ARGV[4], ARGV[5]
local bad, r = check_lease(id, lid)
if bad then return {bad} end
redis.call('ZREM', K_LEASE, member(r, id))
if ARGV[6] ~= '' then r[PR] = tonumber(ARGV[6]) end
to_dead(id, r, NOW)
record(r, EV_DEAD, NOW, DIED_BURIED)
local st = successor_redrive(id, r, NOW)
save(id, r)
return {'OK', wakes(), st, r[DA]}
