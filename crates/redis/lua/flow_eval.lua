-- Test entry point of the differential test (tests/redis/flow_lua.rs): ARGV 4..:
-- groups of 7: tat, iv, burst, slots ('' = none), leased, cool, now
-- (iv '' = no rate). Returns per group: the hold's reason ('' admitted),
-- until ('' none), ready_at ('' without rate), the TAT after a take, and
-- the idle rule's verdict for the state without its leases ('1' idle, else
-- '' and when it will be).
local out = {}
for i = 4, #ARGV, 7 do
  local tat, iv, burst = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local slots, leased = tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
  local cool, now = tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6])
  local why, untl = admit_one(iv, burst, slots, tat, leased, cool, now)
  out[#out + 1] = why or ''
  out[#out + 1] = untl or ''
  if iv then
    out[#out + 1] = bucket_ready_at(tat, iv, burst, now)
    out[#out + 1] = s(bucket_take(tat, iv, now))
  else
    out[#out + 1] = ''
    out[#out + 1] = ''
  end
  local idle, at = gate_idle(tat, cool, now)
  out[#out + 1] = idle and '1' or ''
  out[#out + 1] = at and s(at) or ''
end
return out
