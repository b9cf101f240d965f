-- ARGV 4: id, 5: lease id, 6: delay_ms or '' (backoff), 7: priority or '',
-- 8: '1' when the nack counts towards max_attempts, 9: the failure's text
-- (the record's last_error) or '' to keep the last one, 10: '' for a
-- `nacked` event, else the failed push's status (-1: none) for a
-- `push_failed` one, 11: the push's duration_ms.
-- Returns {'OK', new state, next_due, wakes}, {'NF'}, {'LM'} or {'NOQ'}.
local c = cfg()
if not c then return {'NOQ'} end
promote(c)
local id, lid = ARGV[4], ARGV[5]
local bad, r = check_lease(id, lid)
if bad then return {bad} end
if ARGV[9] ~= '' then r[LE] = ARGV[9] end
if (ARGV[10] or '') ~= '' then
  record(r, EV_PUSH_FAILED, NOW, tonumber(ARGV[10]), ARGV[9], tonumber(ARGV[11]) or 0)
else
  local err = ARGV[9]
  if err == '' then err = nil end
  record(r, EV_NACKED, NOW, tonumber(ARGV[6]) or -1, err)
end
local st = fail(c, id, r, NOW, tonumber(ARGV[6]), ARGV[8] == '1', tonumber(ARGV[7]), false)
return {'OK', st, next_due(c), wakes()}
