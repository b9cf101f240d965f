-- ARGV 4..: groups of 8: id, seq, deliver_at, priority, max_attempts ('' =
-- queue's), lease_ms ('' = queue's), headers (opaque), payload.
-- Returns {'OK', created, seq, deliver_at, state, ...} per item, or {'NOQ'}
-- when the shard has no config (queue unknown here: the caller creates it).
local c = cfg()
if not c then return {'NOQ'} end
local out = {'OK'}
for i = 4, #ARGV, 8 do
  local id = ARGV[i]
  local ex = load(id)
  if ex then
    table.insert(out, 0)
    table.insert(out, s(ex[SK]))
    table.insert(out, s(ex[DA]))
    table.insert(out, ex[ST])
  else
    local r = {tonumber(ARGV[i + 1]), 'S', tonumber(ARGV[i + 2]), NOW, tonumber(ARGV[i + 3]), 0,
      tonumber(ARGV[i + 4]) or '', tonumber(ARGV[i + 5]) or '', '', '', '', 0, 0, 0, 0,
      ARGV[i + 6], ARGV[i + 7]}
    local st = place(id, r)
    save(id, r)
    table.insert(out, 1)
    table.insert(out, s(r[SK]))
    table.insert(out, s(r[DA]))
    table.insert(out, st)
  end
end
return out
