-- ARGV 4: id. Returns {'OK', record} or {'NF'}.
local c = cfg()
if c then promote(c) end
local id = ARGV[4]
local r = load(id)
if not r then return {'NF'} end
local out = {'OK'}
append_record(out, id, r)
return out
