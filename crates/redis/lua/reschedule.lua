-- ARGV 4: id, 5: new deliver_at or '', 6: new priority or ''.
-- Returns {'OK', record}, {'NF'} or {'IS', state}.
local c = cfg()
if c then promote(c) end
local id = ARGV[4]
local r = load(id)
if not r then return {'NF'} end
if r[ST] == 'L' or r[ST] == 'D' then return {'IS', r[ST]} end
unlink(id, r)
r[DA] = tonumber(ARGV[5]) or r[DA]
r[PR] = tonumber(ARGV[6]) or r[PR]
place(id, r)
record(r, EV_RESCHEDULED, NOW)
save(id, r)
local out = {'OK'}
append_record(out, id, r)
return out
