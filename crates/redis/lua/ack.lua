-- ARGV 4..: pairs of id, lease id. Returns {'OK', answer...}, one answer
-- per pair in order: the acked message's seq, 'NF' or 'LM'; then how many
-- waiting lease calls to wake (see `wakes`).
-- Fast path: a current, unexpired lease needs no promotion first (nothing
-- else in the shard affects an ack), which saves three reads per ack; the
-- first pair that is not one promotes once for the whole call. Removals
-- are one ZREM and one HDEL for the call; an id acked twice in one call is
-- not found the second time, as one by one. On a queue with retention (`rt`
-- in cfg, read once when anything was acked) each acked record is then
-- kept as retained (`retain`), in the same call.
local out = {'OK'}
local promoted = false
local members, ids, done, records = {}, {}, {}, {}
for i = 4, #ARGV, 2 do
  local id, lid = ARGV[i], ARGV[i + 1]
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
if #ids > 0 then
  local rt = retain_ms()
  if rt > 0 then
    for i, id in ipairs(ids) do retain(id, records[i], 'A', rt) end
  end
end
out[#out + 1] = wakes()
return out
