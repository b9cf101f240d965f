-- ARGV 4: max, 5: lease_ms or '' (message's, else queue's), 6: lease token,
-- 7: '1' to promote first and report the next due time (the caller's
-- timer says whether anything may be due; '' skips both).
-- Pops the first `max` ready messages atomically, so racing consumers and
-- nodes never get the same delivery. Returns {'OK', next_due, n, the
-- deliver_at of the n messages this call promoted (for the lateness
-- metric), record...}.
local c = cfg()
if not c then return {'OK', '', 0} end
local fired = {}
if ARGV[7] == '1' then fired = promote(c) end
local out = {'OK', '', #fired}
for _, da in ipairs(fired) do out[#out + 1] = da end
if not paused(c) then
  local popped = redis.call('ZPOPMIN', K_READY, ARGV[4])
  local leased = {}
  for j = 1, #popped, 2 do
    local id = popped[j]:sub(17)
    local r = load(id)
    local lm = tonumber(ARGV[5]) or tonumber(r[LM]) or c.lm
    local lu = NOW + lm
    r[ST], r[LU], r[LI] = 'L', lu, ARGV[6] .. '.' .. s((j + 1) / 2)
    r[AT] = r[AT] + 1
    save(id, r)
    leased[j] = s(lu)
    leased[j + 1] = member(r, id)
    append_record(out, id, r, 'L')
  end
  zadd_all(K_LEASE, leased)
end
if ARGV[7] == '1' then out[2] = next_due(c) end
return out
