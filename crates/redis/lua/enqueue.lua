-- ARGV 4..: the items, groups of 11 (see `enqueue_items`). Returns what
-- `enqueue_items` returns, or {'NOQ'} when the shard has no config (queue
-- unknown here: the caller creates it).
local c = cfg()
if not c then return {'NOQ'} end
return enqueue_items(c, 4)
