-- ARGV 4: id, 5: lease id. Returns {'OK', seq}, {'NF'} or {'LM'}.
-- Fast path: a current, unexpired lease needs no promotion first (nothing
-- else in the shard affects an ack), which saves three reads per ack.
local id, lid = ARGV[4], ARGV[5]
local r = load(id)
if not r or r[ST] ~= 'L' or r[LI] ~= lid or r[LU] <= NOW then
  local c = cfg()
  if c then promote(c) end
  local bad
  bad, r = check_lease(id, lid)
  if bad then return {bad} end
end
redis.call('ZREM', K_LEASE, member(r, id))
redis.call('HDEL', K_MSG, id)
return {'OK', s(r[SK])}
