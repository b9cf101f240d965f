-- ARGV 4: id, 5: lease id, 6: lease_ms or ''. Returns {'OK', lease_until},
-- {'NF'}, {'LM'} or {'NOQ'}.
local c = cfg()
if not c then return {'NOQ'} end
promote(c)
local id, lid = ARGV[4], ARGV[5]
local bad, r = check_lease(id, lid)
if bad then return {bad} end
local lm = tonumber(ARGV[6]) or tonumber(r[LM]) or c.lm
local lu = NOW + lm
r[LU] = lu
save(id, r)
redis.call('ZADD', K_LEASE, s(lu), member(r, id))
return {'OK', s(lu)}
