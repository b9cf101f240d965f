-- ARGV 4: id. Removes the message in any state, keeping it as retained
-- ('C') when the queue retains ended messages (`rt` in cfg). A retained
-- message is not found. A successor (common.lua, "Successors") goes with the
-- message. Returns {'OK', seq, wakes} or {'NF'}.
local c = cfg()
if c then promote(c) end
local id = ARGV[4]
local r = load(id)
if not r then return {'NF'} end
unlink(id, r)
redis.call('HDEL', K_MSG, id)
key_removed(id, r)
retain(id, r, 'C', c and c.rt)
return {'OK', s(r[SK]), wakes()}
