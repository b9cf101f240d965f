-- ARGV 4: max, 5: lease_ms or '' (message's, else queue's), 6: lease token,
-- 7: '1' to promote first and report the next due time (the caller's
-- timer says whether anything may be due; '' skips both, except on a
-- queue with flow, which always promotes: its holds end by time), 8: the
-- frontend for the `leased` events (0 http, 1 beanstalk, 2 push).
-- Pops the first `max` ready messages atomically (through the flow gate,
-- lua/flow.lua, when the queue has flow), so racing consumers and nodes
-- never get the same delivery. Returns {'OK', next_due, n, the deliver_at
-- of the n messages this call promoted (for the lateness metric), the
-- messages the gate held back ('reason count ...', '' none), record...}.
local c = cfg()
if not c then return {'OK', '', 0, ''} end
local f = flow_cfg()
local promoting = ARGV[7] == '1' or f ~= nil
local fired = {}
if promoting then fired = promote(c) end
local out = {'OK', '', #fired}
for _, da in ipairs(fired) do out[#out + 1] = da end
out[#out + 1] = ''
local holds_at = #out
if not paused(c) then
  if f then
    local held = {}
    flow_lease(c, f, tonumber(ARGV[4]), ARGV[6], out, held)
    local words = {}
    for reason, n in pairs(held) do words[#words + 1] = reason .. ' ' .. n end
    out[holds_at] = table.concat(words, ' ')
  else
    local popped = redis.call('ZPOPMIN', K_READY, ARGV[4])
    local leased = {}
    for j = 1, #popped, 2 do
      local id = popped[j]:sub(17)
      lease_record(c, id, load(id), ARGV[6] .. '.' .. s((j + 1) / 2), out, leased)
    end
    zadd_all(K_LEASE, leased)
  end
end
if promoting then out[2] = next_due(c) end
return out
