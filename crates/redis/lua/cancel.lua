-- ARGV 4: id. Removes the message in any state. Returns {'OK', seq, wakes} or {'NF'}.
local c = cfg()
if c then promote(c) end
local id = ARGV[4]
local r = load(id)
if not r then return {'NF'} end
unlink(id, r)
redis.call('HDEL', K_MSG, id)
key_removed(id, r)
return {'OK', s(r[SK]), wakes()}
