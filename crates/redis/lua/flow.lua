-- Flow control (api.md "Flow control"; the rules are crates/core/src/flow.rs,
-- and docs/redis.md "Flow control" says why part of them is ported here).
--
-- Ported from flow.rs (docs/redis.md, "Lua ports", lists each with its
-- test): `Bucket::ready_at`, `Bucket::take`, `admit_one` (behind
-- `FlowConfig::admit_queue` and `admit_key`) and the idle rule of
-- `GateState::is_idle`/`idle_at` (`gate_idle`, behind `key_idle`: a key
-- with no live message, no cooldown and a full bucket is forgotten), which
-- `tests/redis/flow_lua.rs` feeds the same random inputs as Rust and
-- compares. Everything else (the emission interval, the deferral rule)
-- is computed in Rust and passed in.
--
-- State, all under the shard's hash tag:
--   cfg fields fl ('1': the queue has flow), qi/qb (queue rate: interval
--     in µs, burst), ki/kb (key rate), qn (concurrency), kn (key slots),
--     od ('1': ordered), written by `flow_set`.
--   flow (hash): qt queue bucket's TAT (µs), qc queue cooldown end (ms),
--     qw when a queue hold ends by time (ms), np parked messages.
--   keys (hash): key -> 1 while it has live messages or state (flow_keys).
--   ktat (hash): key -> its bucket's TAT (µs; absent: full).
--   kleased, kholders (hash): key -> leased messages / messages that hold
--     it (`Message::holds_key`), kept by `save` in the same call as the
--     record and the lease index: a slot is a lease and cannot leak.
--   kcool (zset): key -> cooldown end. kwait (zset): key -> when a parked
--     key's hold ends by time (rate, cooldown); part of next_due, so the
--     node's shard timer wakes exactly that key. kidle (zset): key -> when
--     a key without live messages may be forgotten.
--   km:<key> (set): its live ids. pk:<key> (zset): its parked ready
--     messages (score and member as in ready); kheld (hash): key -> the
--     parked holder of an ordered key (pr4 .. ready member); ph:<key>
--     (zset, as pk): the parked holders of an ordered key that are not its
--     next. A key has one holder, except after a replace or a successor
--     (lua/common.lua, "Successors") moved a message that holds its key to
--     another key: the model's key's next is then the holder first in
--     (priority, deliver_at, seq) order (`first_holder`), and the others
--     wait in ph until a wake-up of the key.
--
-- Parking: the lease loop looks at the first ready message only. A message
-- whose key holds it back moves from ready to its key's pk zset, so a key
-- with 100,000 ready messages costs the others nothing; whatever can end
-- the hold (a lease of the key ending, its holder finishing, time) makes
-- the key's first parked message ready again (`key_wake`), one at a time.

local function hincr(h, f, d)
  if redis.call('HINCRBY', h, f, d) <= 0 then redis.call('HDEL', h, f) end
end

local function k_members(key) return TAGP .. 'km:' .. key end
local function k_parked(key) return TAGP .. 'pk:' .. key end
local function k_later(key) return TAGP .. 'ph:' .. key end

flow_cfg_from = function(v, i)
  FCFG_READ = true
  if v[i] ~= '1' then FCFG = nil return end
  FCFG = {qi = tonumber(v[i + 1]), qb = tonumber(v[i + 2]) or 1, ki = tonumber(v[i + 3]),
          kb = tonumber(v[i + 4]) or 1, qn = tonumber(v[i + 5]), kn = tonumber(v[i + 6]),
          od = v[i + 7] == '1'}
end

-- The queue's flow config (nil: no flow), read at most once per call.
flow_cfg = function()
  if not FCFG_READ then
    flow_cfg_from(redis.call('HMGET', K_CFG, 'fl', 'qi', 'qb', 'ki', 'kb', 'qn', 'kn', 'od'), 1)
  end
  return FCFG
end

-- Port of `Bucket::ready_at`: the first wall time (ms) at or after `now`
-- at which the bucket (TAT `tat` µs, interval `iv` µs) has a token.
local function bucket_ready_at(tat, iv, burst, now)
  local at_us = tat - (math.max(burst, 1) - 1) * iv
  if at_us < 0 then at_us = 0 end
  return math.max(math.ceil(at_us / 1000), now)
end

-- Port of `Bucket::take`: the TAT after spending a token at `now`.
local function bucket_take(tat, iv, now)
  return math.max(tat, now * 1000) + iv
end

-- Port of flow.rs `admit_one`: nil when the gate (bucket TAT `tat`,
-- `leased` slots taken, cooling until `cool`) admits a delivery at `now`,
-- else the hold's reason and, for rate and cooldown, until when.
local function admit_one(iv, burst, slots, tat, leased, cool, now)
  if cool > now then return 'cooldown', cool end
  if slots and leased >= slots then return 'concurrency', nil end
  if iv then
    local at = bucket_ready_at(tat, iv, burst, now)
    if at > now then return 'rate', at end
  end
  return nil, nil
end

local function key_state(key)
  local tat = tonumber(redis.call('HGET', K_KT, key)) or 0
  local leased = tonumber(redis.call('HGET', K_KL, key)) or 0
  local cool = tonumber(redis.call('ZSCORE', K_KCOOL, key)) or 0
  return tat, leased, cool
end

local function holders(key) return tonumber(redis.call('HGET', K_KH, key)) or 0 end

-- The idle rule of `GateState::is_idle` and `idle_at` for a state with no
-- lease: whether it holds nothing a fresh one would not at `now` (no
-- cooldown, a full bucket), and else when it will (ms).
local function gate_idle(tat, cool, now)
  if cool <= now and tat <= now * 1000 then
    return true, nil
  end
  return false, math.max(cool, math.ceil(tat / 1000))
end

-- Forgets a key that is done (no live message and an idle gate), or notes
-- when it will be.
local function key_idle(key)
  if redis.call('SCARD', k_members(key)) > 0 then
    redis.call('ZREM', K_KIDLE, key)
    return
  end
  local tat = tonumber(redis.call('HGET', K_KT, key)) or 0
  local cool = tonumber(redis.call('ZSCORE', K_KCOOL, key)) or 0
  local idle, at = gate_idle(tat, cool, NOW)
  if idle then
    redis.call('HDEL', K_KEYS, key)
    redis.call('HDEL', K_KT, key)
    redis.call('HDEL', K_KHP, key)
    redis.call('ZREM', K_KCOOL, key)
    redis.call('ZREM', K_KWAIT, key)
    redis.call('ZREM', K_KIDLE, key)
  else
    redis.call('ZADD', K_KIDLE, s(at), key)
  end
end

local function park(key, pr, m)
  redis.call('ZREM', K_READY, m)
  redis.call('ZADD', k_parked(key), pr, m)
  redis.call('HINCRBY', K_FLOW, 'np', 1)
end

-- Parks the key's next, a holder held back by the key's gate. Another
-- holder parked there before (the next then) waits in ph.
local function park_holder(key, pr, m)
  redis.call('ZREM', K_READY, m)
  local old = redis.call('HGET', K_KHP, key)
  if old then redis.call('ZADD', k_later(key), s(struct.unpack('>I4', old)), old:sub(5)) end
  redis.call('HSET', K_KHP, key, struct.pack('>I4', tonumber(pr)) .. m)
  redis.call('HINCRBY', K_FLOW, 'np', 1)
end

local function unpark(key, pr, m)
  redis.call('ZREM', k_parked(key), m)
  redis.call('ZADD', K_READY, pr, m)
  hincr(K_FLOW, 'np', -1)
  WOKE = WOKE + 1
end

-- Whether ready member `a` (priority `pa`) goes before `b` (`pb`):
-- (priority, deliver_at, seq), compared as numbers.
local function before(pa, a, pb, b)
  pa, pb = tonumber(pa), tonumber(pb)
  if pa ~= pb then return pa < pb end
  local da, sa = struct.unpack('>I8I8', a)
  local db, sb = struct.unpack('>I8I8', b)
  if da ~= db then return da < db end
  return sa < sb
end

-- Something that may end `key`'s hold happened (a lease of it ended, its
-- holder finished, time passed, limits changed): its parked holder, else
-- its first parked message when the key admits a delivery now, is ready
-- again; a hold by time is noted in kwait.
key_wake = function(key)
  local f = flow_cfg()
  if not f then return end
  local hp = redis.call('HGET', K_KHP, key)
  if hp then
    redis.call('HDEL', K_KHP, key)
    redis.call('ZADD', K_READY, s(struct.unpack('>I4', hp)), hp:sub(5))
    hincr(K_FLOW, 'np', -1)
    WOKE = WOKE + 1
    return
  end
  -- A holder that was not the key's next may be now: the first of them
  -- is looked at again (the lease loop parks it back if not).
  local later = redis.call('ZRANGE', k_later(key), 0, 0, 'WITHSCORES')
  if later[1] then
    redis.call('ZREM', k_later(key), later[1])
    redis.call('ZADD', K_READY, later[2], later[1])
    hincr(K_FLOW, 'np', -1)
    WOKE = WOKE + 1
    return
  end
  local ph = redis.call('ZRANGE', k_parked(key), 0, 0, 'WITHSCORES')
  if not ph[1] then return end
  if f.od and holders(key) > 0 then return end
  local tat, leased, cool = key_state(key)
  local why, untl = admit_one(f.ki, f.kb, f.kn, tat, leased, cool, NOW)
  if why then
    if untl then redis.call('ZADD', K_KWAIT, 'LT', s(untl), key) end
    return
  end
  unpark(key, ph[2], ph[1])
end

-- A message becoming ready (enqueued or promoted) joins its key's park at
-- once, instead of passing through ready, when the lease loop would park
-- it anyway: its key's gate holds now (a slot, a token or a cooldown; the
-- end of the hold wakes the key), or, with `ordered`, another message
-- holds the key (its end wakes it), or a message of the key that goes
-- before it was made ready by this call (`readied`: that one's delivery,
-- parking or removal wakes the key). So a key's backlog is never walked
-- by the lease loop, and the order stays the model's. Returns whether it
-- was parked.
park_new = function(key, pr, m, readied)
  local f = flow_cfg()
  if not f then return false end
  local first = readied[key]
  local park = first and before(first[1], first[2], pr, m)
  if not park and f.od and holders(key) > 0 then park = true end
  if not park then
    local tat, leased, cool = key_state(key)
    local why, untl = admit_one(f.ki, f.kb, f.kn, tat, leased, cool, NOW)
    if why then
      park = true
      if untl then redis.call('ZADD', K_KWAIT, 'LT', s(untl), key) end
    end
  end
  if not park then
    if not first or before(pr, m, first[1], first[2]) then readied[key] = {pr, m} end
    return false
  end
  redis.call('ZADD', k_parked(key), pr, m)
  redis.call('HINCRBY', K_FLOW, 'np', 1)
  return true
end

key_saved = function(_, r)
  local key = r[KY]
  local l1, h1 = r[ST] == 'L', holds(r)
  if l1 ~= (r.l0 or false) then hincr(K_KL, key, l1 and 1 or -1) end
  if h1 ~= (r.h0 or false) then hincr(K_KH, key, h1 and 1 or -1) end
  local wake = (r.l0 and not l1) or (r.h0 and not h1)
  r.l0, r.h0 = l1, h1
  if wake then key_wake(key) end
end

-- A message leaves (ack, cancel): its key's counts, live set and wake.
key_removed = function(id, r)
  if r.l0 then ENDED = ENDED + 1 end
  local key = r[KY]
  if key == '' then return end
  if r.l0 then hincr(K_KL, key, -1) end
  if r.h0 then hincr(K_KH, key, -1) end
  redis.call('SREM', k_members(key), id)
  key_idle(key)
  key_wake(key)
end

key_added = function(id, key)
  redis.call('SADD', k_members(key), id)
  redis.call('HSET', K_KEYS, key, 1)
end

-- A live message (its loaded record `r`, out of the ready and park
-- indexes) takes the flow key `key` (a replace or a successor brought
-- another): it leaves its old key (counts, live set, forgotten when done,
-- woken) and joins the new one, its counts moved along, so that `save`
-- keeps them in step on the new key from there.
key_moved = function(id, r, key)
  local old = r[KY]
  if old == key then return end
  if old ~= '' then
    if r.l0 then hincr(K_KL, old, -1) end
    if r.h0 then hincr(K_KH, old, -1) end
    redis.call('SREM', k_members(old), id)
    key_idle(old)
    key_wake(old)
  end
  r[KY] = key
  if key ~= '' then
    key_added(id, key)
    if r.l0 then redis.call('HINCRBY', K_KL, key, 1) end
    if r.h0 then redis.call('HINCRBY', K_KH, key, 1) end
  end
end

-- A parked message leaves its park (cancel, reschedule, lease by id,
-- replace).
unpark_one = function(id, r)
  local key, m = r[KY], rmember(r[DA], r[SK], id)
  if redis.call('ZREM', k_parked(key), m) == 1 or redis.call('ZREM', k_later(key), m) == 1 then
    hincr(K_FLOW, 'np', -1)
    return
  end
  local hp = redis.call('HGET', K_KHP, key)
  if hp and hp:sub(5) == m then
    redis.call('HDEL', K_KHP, key)
    hincr(K_FLOW, 'np', -1)
  end
end

-- Part of promotion: keys whose hold ended by time are woken, keys done
-- are forgotten.
flow_promote = function()
  if not flow_cfg() then return end
  for _, key in ipairs(redis.call('ZRANGE', K_KWAIT, '-inf', s(NOW), 'BYSCORE', 'LIMIT', 0, 1000)) do
    redis.call('ZREM', K_KWAIT, key)
    key_wake(key)
  end
  for _, key in ipairs(redis.call('ZRANGE', K_KIDLE, '-inf', s(NOW), 'BYSCORE', 'LIMIT', 0, 1000)) do
    key_idle(key)
  end
end

-- Part of next_due: the next key wake-up, the end of a queue hold.
flow_next = function(best)
  if not flow_cfg() then return best end
  local w = redis.call('ZRANGE', K_KWAIT, '(' .. s(NOW), '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  local times = {tonumber(w[2]), tonumber(redis.call('HGET', K_FLOW, 'qw')),
    tonumber(redis.call('HGET', K_FLOW, 'qc'))}
  for _, t in pairs(times) do
    if t and t > NOW and (not best or t < best) then best = t end
  end
  return best
end

-- Leases one ready message (popped from ready by the caller): the record
-- becomes leased and is appended to `out`; its lease index entry to
-- `leased` (score, member pairs), its `leased` event to its history
-- (the frontend in ARGV[8]).
local function lease_record(c, id, r, lid, out, leased)
  local lm = tonumber(ARGV[5]) or tonumber(r[LM]) or c.lm
  local lu = NOW + lm
  r[ST], r[LU], r[LI] = 'L', lu, lid
  r[AT] = r[AT] + 1
  record(r, EV_LEASED, NOW, lm, tonumber(ARGV[8]) or 0)
  save(id, r)
  leased[#leased + 1] = s(lu)
  leased[#leased + 1] = member(r, id)
  append_record(out, id, r, 'L')
end

-- With `ordered`: the holder of `key` that is its next when the holder
-- `r` (of `id`) is not, as (id, priority, ready member); nil when `r` is
-- (`Message::holds_key`, `flow::keys_next`: the holder first in
-- (priority, deliver_at, seq) order). A key has more than one holder only
-- after a replace or successor moved one to it, and only then are the
-- key's live messages read.
local function first_holder(key, id, r)
  if holders(key) <= 1 then return nil end
  local bid, bpr, bm = nil, r[PR], rmember(r[DA], r[SK], id)
  for _, other in ipairs(redis.call('SMEMBERS', k_members(key))) do
    if other ~= id then
      local o = load(other)
      if o and holds(o) then
        local om = rmember(o[DA], o[SK], other)
        if before(o[PR], om, bpr, bm) then bid, bpr, bm = other, o[PR], om end
      end
    end
  end
  if not bid then return nil end
  return bid, bpr, bm
end

-- Steps of one flow lease call (each delivers, parks or swaps one ready
-- message), so one call stays short whatever piles up.
local FLOW_STEPS = 2000

-- The lease loop of a queue with flow: the first ready message, while the
-- queue admits a delivery: delivered when its key admits it, else parked.
-- Appends the leased records to `out`, and counts in `held` the messages
-- held back by reason (`delayd_flow_held_total`).
local function flow_lease(c, f, max, token, out, held)
  local function hold(reason) held[reason] = (held[reason] or 0) + 1 end
  local qtat = tonumber(redis.call('HGET', K_FLOW, 'qt')) or 0
  local qcool = tonumber(redis.call('HGET', K_FLOW, 'qc')) or 0
  local qleased = redis.call('ZCARD', K_LEASE)
  local leased, got, steps = {}, 0, 0
  while got < max and steps < FLOW_STEPS do
    steps = steps + 1
    local top = redis.call('ZRANGE', K_READY, 0, 0, 'WITHSCORES')
    if not top[1] then break end
    local why, untl = admit_one(f.qi, f.qb, f.qn, qtat, qleased, qcool, NOW)
    if why then
      hold(why)
      if untl then redis.call('HSET', K_FLOW, 'qw', s(untl)) end
      break
    end
    local m, pr = top[1], top[2]
    local id = m:sub(17)
    local r = load(id)
    local key = r[KY]
    local go = true
    local other, opr, om = nil, nil, nil
    if key ~= '' and f.od and holds(r) then other, opr, om = first_holder(key, id, r) end
    if other then
      -- Another holder is the key's next: this one waits in ph, and the
      -- next goes now if it waited there.
      hold('ordered')
      redis.call('ZREM', K_READY, m)
      redis.call('ZADD', k_later(key), pr, m)
      if redis.call('ZREM', k_later(key), om) == 1 then
        redis.call('ZADD', K_READY, s(opr), om)
        WOKE = WOKE + 1
      else
        redis.call('HINCRBY', K_FLOW, 'np', 1)
      end
      go = false
    elseif key ~= '' then
      local first = f.od and holds(r)
      local ph = nil
      if not first then ph = redis.call('ZRANGE', k_parked(key), 0, 0, 'WITHSCORES') end
      if ph and ph[1] and before(ph[2], ph[1], pr, m) then
        -- The key's earlier parked message goes first.
        park(key, pr, m)
        unpark(key, ph[2], ph[1])
        go = false
      elseif f.od and not first and holders(key) > 0 then
        hold('ordered')
        park(key, pr, m)
        go = false
      else
        local tat, kl, cool = key_state(key)
        local kwhy, kuntil = admit_one(f.ki, f.kb, f.kn, tat, kl, cool, NOW)
        if kwhy then
          hold(kwhy)
          if first then park_holder(key, pr, m) else park(key, pr, m) end
          if kuntil then redis.call('ZADD', K_KWAIT, 'LT', s(kuntil), key) end
          go = false
        elseif f.ki then
          redis.call('HSET', K_KT, key, s(bucket_take(tat, f.ki, NOW)))
        end
      end
    end
    if go then
      redis.call('ZREM', K_READY, m)
      if f.qi then qtat = bucket_take(qtat, f.qi, NOW) end
      got = got + 1
      lease_record(c, id, r, token .. '.' .. s(got), out, leased)
      qleased = qleased + 1
      if key ~= '' then key_wake(key) end
    end
  end
  if f.qi then redis.call('HSET', K_FLOW, 'qt', s(qtat)) end
  if steps >= FLOW_STEPS then redis.call('HSET', K_FLOW, 'qw', s(NOW + 1)) end
  zadd_all(K_LEASE, leased)
end

-- How many waiting lease calls this call's changes may let through: the
-- parked messages it made ready, and on a queue with flow the slots it
-- freed.
local function wakes()
  if ENDED > 0 and flow_cfg() then return WOKE + ENDED end
  return WOKE
end
