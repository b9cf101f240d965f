-- ARGV 4: 'all' or 'ids', 5..: ids. Moves dead messages back to ready with
-- attempts reset; 'all' moves at most 1000 per call (the caller loops).
-- Returns {'OK', moved}.
local c = cfg()
if c then promote(c) end
local ids = {}
if ARGV[4] == 'all' then
  for _, m in ipairs(redis.call('ZRANGE', K_DEAD, 0, 999)) do table.insert(ids, m:sub(9)) end
else
  for i = 5, #ARGV do table.insert(ids, ARGV[i]) end
end
local moved = 0
for _, id in ipairs(ids) do
  local r = load(id)
  if r and r[ST] == 'D' then
    redis.call('ZREM', K_DEAD, member(r, id))
    r[AT], r[DF], r[DD], r[KI] = 0, 0, '', r[KI] + 1
    -- A redriven message is ready now: a future deliver_at is pulled in.
    r[DA] = math.min(r[DA], NOW)
    r[ST] = 'R'
    redis.call('ZADD', K_READY, s(r[PR]), rmember(r[DA], r[SK], id))
    record(r, EV_REDRIVEN, NOW)
    save(id, r)
    moved = moved + 1
  end
end
return {'OK', moved}
