-- ARGV 4..: groups of 8: id, seq, deliver_at, priority, max_attempts ('' =
-- queue's), lease_ms ('' = queue's), headers (opaque), payload; seqs
-- increase along the groups. Returns {'OK', created, seq, deliver_at,
-- state, ...} per item, {'NOQ'} when the shard has no config (queue unknown
-- here: the caller creates it), or {'SEQ'} when the first seq is not above
-- the last one this shard issued (`sl` in cfg), so that seqs increase per
-- queue shard whichever node enqueues: the caller takes fresh seqs from
-- the deployment's counter and calls again. New records are stored with
-- HSETNX (an existing id keeps its message: idempotent enqueue), and the
-- call's index entries go in one ZADD per set.
local c = cfg()
if not c then return {'NOQ'} end
if tonumber(ARGV[5]) <= c.sl then return {'SEQ'} end
local last = c.sl
local out = {'OK'}
local sched, ready = {}, {}
-- Ids created by this call, with their state: their index entries are not
-- written yet when the same id comes again later in the call.
local created = {}
for i = 4, #ARGV, 8 do
  local id = ARGV[i]
  local r = {tonumber(ARGV[i + 1]), 'S', tonumber(ARGV[i + 2]), NOW, tonumber(ARGV[i + 3]),
    ARGV[i + 7], ARGV[i + 6], 0, tonumber(ARGV[i + 4]) or '', tonumber(ARGV[i + 5]) or '',
    '', '', '', 0, 0, 0, 0}
  local n = #out
  if redis.call('HSETNX', K_MSG, id, pack(r)) == 0 then
    local ex = load(id)
    out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 0, ex[SK], ex[DA], created[id] or state_of(id, ex)
  else
    last = r[SK]
    local st = 'S'
    if r[DA] <= NOW then
      st = 'R'
      ready[#ready + 1] = s(r[PR])
      ready[#ready + 1] = rmember(r[DA], r[SK], id)
    else
      sched[#sched + 1] = s(r[DA])
      sched[#sched + 1] = smember(r, id)
    end
    out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 1, r[SK], r[DA], st
    created[id] = st
  end
end
zadd_all(K_SCHED, sched)
zadd_all(K_READY, ready)
if last > c.sl then redis.call('HSET', K_CFG, 'sl', s(last)) end
return out
