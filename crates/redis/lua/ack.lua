-- ARGV 4..: pairs of id, lease id. Returns {'OK', answer...}, one answer
-- per pair in order: the acked message's seq, 'NF' or 'LM'.
-- Fast path: a current, unexpired lease needs no promotion first (nothing
-- else in the shard affects an ack), which saves three reads per ack; the
-- first pair that is not one promotes once for the whole call.
local out = {'OK'}
local promoted = false
for i = 4, #ARGV, 2 do
  local id, lid = ARGV[i], ARGV[i + 1]
  local r = load(id)
  local bad = nil
  if not r or r[ST] ~= 'L' or r[LI] ~= lid or r[LU] <= NOW then
    if not promoted then
      local c = cfg()
      if c then promote(c) end
      promoted = true
    end
    bad, r = check_lease(id, lid)
  end
  if bad then
    table.insert(out, bad)
  else
    redis.call('ZREM', K_LEASE, member(r, id))
    redis.call('HDEL', K_MSG, id)
    table.insert(out, s(r[SK]))
  end
end
return out
