-- ARGV 4: id. Returns {'OK', enqueued_at, tail} or {'NF'}: the stored
-- history (see "History" in common.lua; '' when it has none) of the live
-- message, else of the retained one while its window lasts at NOW. Time
-- is applied first (an expired lease's events are there).
local c = cfg()
if c then promote(c) end
local id = ARGV[4]
local r = load(id) or load_retained(id)
if not r then return {'NF'} end
return {'OK', r[EA], tail(r)}
