-- ARGV 4: flow key. Returns {'OK', scheduled, ready, leased, dead,
-- cooling_until or ''} over the key's live messages, or {'NOQ'}.
-- O(the key's live messages).
local c = cfg()
if not c then return {'NOQ'} end
promote(c)
local key = ARGV[4]
local n = {S = 0, R = 0, L = 0, D = 0}
for _, id in ipairs(redis.call('SMEMBERS', TAGP .. 'km:' .. key)) do
  local r = load(id)
  if r then
    local st = state_of(id, r)
    n[st] = n[st] + 1
  end
end
local cool = tonumber(redis.call('ZSCORE', K_KCOOL, key))
local until_ = ''
if cool and cool > NOW then until_ = cool end
return {'OK', n.S, n.R, n.L, n.D, until_}
