-- ARGV 4..: triples of id, lease id, seq ('': none). Returns {'OK',
-- answer...}, one answer per triple in order: the acked message's seq,
-- 'NF', 'LM', 'SQ' or {seq, new seq, state, deliver_at}; then how many
-- waiting lease calls to wake (see `wakes`).
-- A message with a successor (see "Successors" in common.lua) ends and
-- its successor is enqueued as a new message with its id, in the same
-- call: with the triple's seq, which must be above the last one the shard
-- issued (`sl` in cfg), else nothing is done and the answer is 'SQ' (the
-- caller takes fresh seqs from the deployment's counter and acks again);
-- the answer is then the old seq, the new message's seq, state ('R'/'S')
-- and deliver_at. It is not retained (its id is live again).
-- Fast path: a current, unexpired lease needs no promotion first (nothing
-- else in the shard affects an ack), which saves three reads per ack; the
-- first triple that is not one promotes once for the whole call. Removals
-- are one ZREM and one HDEL for the call; an id acked twice in one call is
-- not found the second time, as one by one. On a queue with retention (`rt`
-- in cfg, read once when anything was acked) each acked record is then
-- kept as retained (`retain`), in the same call.
local out = {'OK'}
local promoted = false
local members, ids, done, records = {}, {}, {}, {}
-- The shard's last seq, read at the first successor.
local sl, sl0 = nil, nil
for i = 4, #ARGV, 3 do
  local id, lid, seq = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local r, bad = nil, nil
  if done[id] then
    bad = 'NF'
  else
    r = load(id)
    if not r or r[ST] ~= 'L' or r[LI] ~= lid or r[LU] <= NOW then
      if not promoted then
        local c = cfg()
        if c then promote(c) end
        promoted = true
      end
      bad, r = check_lease(id, lid)
    end
  end
  if bad then
    out[#out + 1] = bad
  elseif r[SU] ~= '' then
    if not sl then
      sl = tonumber(redis.call('HGET', K_CFG, 'sl')) or 0
      sl0 = sl
    end
    if not seq or seq <= sl then
      out[#out + 1] = 'SQ'
    else
      sl = seq
      key_removed(id, r)
      redis.call('ZREM', K_LEASE, member(r, id))
      local n = new_record(seq, r[SU])
      redis.call('HSET', K_MSG, id, pack(n) .. ENQUEUED_TAIL)
      if n[KY] ~= '' then key_added(id, n[KY]) end
      local sched, ready = {}, {}
      local st = index_new(id, n, {}, sched, ready)
      zadd_all(K_SCHED, sched)
      zadd_all(K_READY, ready)
      out[#out + 1] = {r[SK], seq, st, n[DA]}
    end
  else
    done[id] = true
    key_removed(id, r)
    members[#members + 1] = member(r, id)
    ids[#ids + 1] = id
    records[#records + 1] = r
    out[#out + 1] = r[SK]
  end
end
for i = 1, #ids, 400 do
  local last = math.min(i + 399, #ids)
  redis.call('ZREM', K_LEASE, unpack(members, i, last))
  redis.call('HDEL', K_MSG, unpack(ids, i, last))
end
if sl and sl > sl0 then redis.call('HSET', K_CFG, 'sl', s(sl)) end
if #ids > 0 then
  local rt = retain_ms()
  if rt > 0 then
    for i, id in ipairs(ids) do retain(id, records[i], 'A', rt) end
  end
end
out[#out + 1] = wakes()
return out
