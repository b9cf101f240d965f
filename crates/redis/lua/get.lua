-- ARGV 4: id. Returns {'OK', record} or {'NF'}: the live message, else the
-- retained one ('A'/'C') while its window lasts at NOW.
local c = cfg()
if c then promote(c) end
local id = ARGV[4]
local r = load(id)
local st = nil
if not r then
  r = load_retained(id)
  if not r then return {'NF'} end
  st = r[ST]
end
local out = {'OK'}
append_record(out, id, r, st)
return out
