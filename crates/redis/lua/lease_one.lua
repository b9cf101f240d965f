-- ARGV 4: id, 5: lease_ms or '', 6: lease id, 7: the frontend for the
-- `leased` event (0 http, 1 beanstalk, 2 push). Leases one scheduled,
-- ready or dead message (beanstalkd reserve-job). Returns {'OK', record},
-- {'NF'}, {'IS', state} or {'NOQ'}.
local c = cfg()
if not c then return {'NOQ'} end
promote(c)
local id = ARGV[4]
local r = load(id)
if not r then return {'NF'} end
if r[ST] == 'L' then return {'IS', 'L'} end
unlink(id, r)
local lm = tonumber(ARGV[5]) or tonumber(r[LM]) or c.lm
local lu = NOW + lm
r[ST], r[LU], r[LI], r[DD] = 'L', lu, ARGV[6], ''
r[AT] = r[AT] + 1
record(r, EV_LEASED, NOW, lm, tonumber(ARGV[7]) or 1)
save(id, r)
redis.call('ZADD', K_LEASE, s(lu), member(r, id))
local out = {'OK'}
append_record(out, id, r, 'L')
return out
