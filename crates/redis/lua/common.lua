-- The shared part of delayd's function library (src/scripts.rs wraps each
-- lua/<op>.lua body in a function after it and registers it). One queue
-- shard per call: every key lives under the shard's hash tag, so a call is
-- atomic on a single Redis and on one Redis Cluster slot.
--
-- KEYS: 1 cfg (hash), 2 sched (zset), 3 ready (zset), 4 lease (zset),
--       5 dead (zset), 6 msg (hash: id -> packed record), 7 schedules
--       (hash: schedule id -> record JSON), 8 cursors (zset: score
--       next_fire_at, member schedule id).
-- ARGV: 1 unused, 2 now (epoch ms), 3 jitter seed, 4.. the function's.
-- Functions get keys and args as parameters, not as globals (a library may
-- not create globals): `bind` stores them in these chunk-level locals,
-- which every body reads as upvalues. Calls never interleave, so one set
-- of upvalues per library is safe.
--
-- Records: one msgpack array per message, the value of field `id` in the
-- shard's `msg` hash (no key per message). A loaded record `r` is that
-- array itself (fields in stored order, below), so load and save do no
-- remapping; trailing fields at their defaults are left out when stored.
-- The message's history follows the array in the same value ("History").
--
-- Members: lease and dead use `seq8 .. id` (seq8 = seq as 8 bytes big
-- endian), so equal scores order by seq. sched uses `seq8 .. pr4 .. id`
-- (pr4 = priority, 4 bytes), so promotion builds the ready member and score
-- from the sched member and score alone, without loading the record.
-- ready uses score = priority and member `da8 .. seq8 .. id`, so equal
-- priorities order by (deliver_at, seq) bytewise, exactly (no packing into
-- a double).
--
-- State: a record says 'S' while pending, 'L' leased, 'D' dead ('R' when
-- it was made ready directly). Promotion moves members from sched to ready
-- without rewriting records, so a pending record's exact state is where its
-- member is (`state_of`). A retained record (see "Retention" below) says
-- 'A' acked or 'C' cancelled, and lives in a key of its own, not in msg.
local KEYS, ARGV, K_CFG, K_SCHED, K_READY, K_LEASE, K_DEAD, K_MSG, K_SCHEDULES, K_CURSORS, NOW, SEED
-- Retention's index (zset: score until, member id), under the same hash
-- tag; each retained record is the key `TAGP rt:<id>` (see "Retention").
local K_RET
-- Flow control's keys, under the same hash tag (see lua/flow.lua): TAGP is
-- the shard's key prefix `{P:queue#k}:`; per flow key there are also
-- `TAGP km:<key>` (set of its live ids), `TAGP pk:<key>` (its parked
-- ready messages) and `TAGP ph:<key>` (its parked holders that are not
-- its next).
local TAGP, K_FLOW, K_KEYS, K_KT, K_KL, K_KH, K_KHP, K_KCOOL, K_KWAIT, K_KIDLE
-- Per call: the flow config once read (FCFG_READ), leases this call ended
-- (ENDED) and parked messages it made ready again (WOKE), so the node
-- wakes waiting lease calls.
local FCFG_READ, FCFG, ENDED, WOKE
-- Flow hooks, defined in lua/flow.lua (appended after this file).
local key_saved, key_removed, key_added, unpark_one, flow_promote, flow_next, flow_cfg_from, key_wake,
  park_new, flow_cfg, key_moved
local function bind(keys, args)
  KEYS, ARGV = keys, args
  K_CFG, K_SCHED, K_READY, K_LEASE, K_DEAD, K_MSG = keys[1], keys[2], keys[3], keys[4], keys[5], keys[6]
  K_SCHEDULES, K_CURSORS = keys[7], keys[8]
  NOW, SEED = tonumber(args[2]), tonumber(args[3])
  TAGP = K_CFG:sub(1, -4)
  K_FLOW, K_KEYS, K_KT, K_KL = TAGP .. 'flow', TAGP .. 'keys', TAGP .. 'ktat', TAGP .. 'kleased'
  K_KH, K_KHP, K_KCOOL = TAGP .. 'kholders', TAGP .. 'kheld', TAGP .. 'kcool'
  K_KWAIT, K_KIDLE = TAGP .. 'kwait', TAGP .. 'kidle'
  K_RET = TAGP .. 'retained'
  FCFG_READ, FCFG, ENDED, WOKE = false, nil, 0, 0
end
local PROMOTE_LIMIT = 1000
-- Record fields in stored order: seq, state (S/R/L/D), deliver_at,
-- enqueued_at (stored as deliver_at - enqueued_at, which is small),
-- priority, payload, headers, attempts, max_attempts, lease_ms,
-- lease_until, lease id, died_at, timeouts, releases, buries, kicks, flow
-- key, deferrals in a row, the last failure's text, then (retained records
-- only) ended_at and until (the end of its retention), then (leased records
-- only) the successor (see "Successors"). Optional ones are ''.
-- Replies list them in this order after the id, up to ended_at (RFIELDS).
-- A record is stored without its trailing fields that hold their defaults,
-- so records written before flow control (ending at kicks) or before
-- `last_error` (ending at deferrals) read as no key, no deferral and no
-- last error, a live record never stores the two retention fields unless
-- it has a successor (then as ''), and a record without a successor (every
-- record written before successors) ends before that field.
local SK, ST, DA, EA, PR, PL, HD, AT, MA, LM, LU, LI, DD, CT, RL, BU, KI, KY, DF, LE, EN, UN, SU =
  1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23
local NFIELDS, RFIELDS = 23, 21
-- Defaults of the fields that may be left out (7 and up).
local DEFAULT = {[HD] = '', [AT] = 0, [MA] = '', [LM] = '', [LU] = '', [LI] = '', [DD] = '',
                 [CT] = 0, [RL] = 0, [BU] = 0, [KI] = 0, [KY] = '', [DF] = 0, [LE] = '',
                 [EN] = '', [UN] = '', [SU] = ''}
-- Successors (api.md, "Retention, replace and debounce"): a replace or
-- debounce of a leased message is kept in its record's field SU until the
-- lease ends, as a nested msgpack array of the content and due time it
-- brings (`Replacement`): payload, headers, priority, max_attempts,
-- lease_ms, flow key, deliver_at (debounce's cap applied) and since (when
-- the successor's first request came: a later debounce's cap counts from
-- it). Being part of the record, it is read, written, retained (never: an
-- end drops it) and deleted (cancel, `delete_queue`) with it, atomically,
-- with no key of its own.
local S_PL, S_HD, S_PR, S_MA, S_LM, S_KY, S_DA, S_SI = 1, 2, 3, 4, 5, 6, 7, 8

-- Numbers go to Redis commands as exact decimal strings (Lua's default
-- %.14g would round epoch milliseconds and seqs). Replies need no such
-- care: a Lua number becomes an exact integer reply.
local function s(n) return string.format('%d', n) end
local function member(r, id) return struct.pack('>I8', r[SK]) .. id end
local function smember(r, id) return struct.pack('>I8I4', r[SK], r[PR]) .. id end
local function rmember(da, seq, id) return struct.pack('>I8I8', da, seq) .. id end

-- Whether the message holds its key (`Message::holds_key`): it has a key,
-- is not dead, and was delivered (or deferred) before.
local function holds(r)
  return r[KY] ~= '' and r[ST] ~= 'D' and (r[AT] > 0 or r[DF] > 0)
end

-- A stored value is the packed record, then (when it has a history) the
-- history's tail (see "History" below): only the record is decoded here,
-- and the tail stays as stored (`r.hv`, from 0-based offset `r.ho`) until
-- an event is recorded or the record is written again.
local function unpack_record(v)
  local off, r = cmsgpack.unpack_one(v)
  for i = #r + 1, NFIELDS do r[i] = DEFAULT[i] end
  if off >= 0 then r.hv, r.ho = v, off end
  return r
end

-- A loaded record remembers (in named fields, which `pack` ignores)
-- whether it was leased and held its key, so `save` can keep the per-key
-- leased and holder counts in step with the records, in the same call.
local function load(id)
  local v = redis.call('HGET', K_MSG, id)
  if not v then return nil end
  local r = unpack_record(v)
  r[EA] = r[DA] - r[EA]
  r.l0, r.h0 = r[ST] == 'L', holds(r)
  return r
end

-- The record's stored form (enqueued_at as an offset, defaults trimmed).
local function pack(r)
  local n = NFIELDS
  while n > HD and (r[n] == nil or r[n] == DEFAULT[n]) do n = n - 1 end
  local t = {unpack(r, 1, n)}
  t[EA] = r[DA] - r[EA]
  return cmsgpack.pack(t)
end

-- History (api.md, "Message history"). A message's events follow its
-- packed record in the same value (the msg field, or a retained record's
-- key), so they live, are retained and are deleted with it, and every
-- transition appends in the call (and the write) it already makes. The
-- tail is one msgpack integer, the number of events ever recorded (`hn`),
-- then the kept events (`hs`, at most HISTORY_LEN), oldest first, each one
-- msgpack array {code, at - enqueued_at, attempt, extra...}:
--   0 enqueued, 1 replaced {after_lease 0/1}, 2 rescheduled,
--   3 leased {lease_until - at, via: 0 http, 1 beanstalk, 2 push},
--   4 acked, 5 nacked {delay_ms (-1: backoff), [error]},
--   6 deferred {until - at, reason: 0 nack, 1 push_429, 2 push_503},
--   7 expired, 8 push_failed {status (-1: none), error, duration_ms},
--   9 dead {reason: 0 max_attempts, 1 max_deferrals, 2 buried},
--   10 redriven, 11 cancelled.
-- A value without a tail (written before history) has no events. Older
-- versions decode the record alone (the first msgpack object) and drop
-- the tail when they write the record again.
local HISTORY_LEN = 32
local EV_ENQUEUED, EV_REPLACED, EV_RESCHEDULED, EV_LEASED, EV_ACKED, EV_NACKED, EV_DEFERRED =
  0, 1, 2, 3, 4, 5, 6
local EV_EXPIRED, EV_PUSH_FAILED, EV_DEAD, EV_REDRIVEN, EV_CANCELLED = 7, 8, 9, 10, 11
local DIED_ATTEMPTS, DIED_DEFERRALS, DIED_BURIED = 0, 1, 2
-- The tail of a new message: 1 event, {EV_ENQUEUED, 0, 0} (enqueued at
-- enqueued_at, attempt 0), in msgpack (cmsgpack is not reachable while the
-- library loads).
local ENQUEUED_TAIL = '\1\147\0\0\0'

-- Decodes the stored tail into r.hn and r.hs, once.
local function history_of(r)
  if r.hs then return end
  r.hn, r.hs = 0, ''
  if r.hv then
    local o, n = cmsgpack.unpack_one(r.hv, r.ho)
    if o >= 0 then r.hn, r.hs = n, r.hv:sub(o + 1) end
  end
end

-- Appends an event of `code` at `at` with the attempt as it is now (after
-- the transition) and the extra fields `...` (no nil but the last),
-- dropping the oldest beyond HISTORY_LEN.
local function record(r, code, at, ...)
  history_of(r)
  local kept = r.hs
  if r.hn >= HISTORY_LEN then
    local o = cmsgpack.unpack_one(kept)
    if o >= 0 then kept = kept:sub(o + 1) else kept = '' end
  end
  r.hs = kept .. cmsgpack.pack({code, at - r[EA], r[AT], ...})
  r.hn = r.hn + 1
end

-- The tail to store after the packed record.
local function tail(r)
  if r.hs then
    if r.hn == 0 then return '' end
    return cmsgpack.pack(r.hn) .. r.hs
  end
  if r.hv then return r.hv:sub(r.ho + 1) end
  return ''
end

local function save(id, r)
  redis.call('HSET', K_MSG, id, pack(r) .. tail(r))
  if r.l0 and r[ST] ~= 'L' then ENDED = ENDED + 1 end
  if r[KY] ~= '' then key_saved(id, r) else r.l0 = r[ST] == 'L' end
end

local function cfg()
  local c = redis.call('HMGET', K_CFG, 'lm', 'ma', 'ri', 'rx', 'rm', 'pu', 'sl',
    'fl', 'qi', 'qb', 'ki', 'kb', 'qn', 'kn', 'od', 'rt')
  flow_cfg_from(c, 8)
  if not c[1] then return nil end
  return {lm = tonumber(c[1]), ma = tonumber(c[2]), ri = tonumber(c[3]),
          rx = tonumber(c[4]), rm = tonumber(c[5]), pu = c[6] or '',
          sl = tonumber(c[7]) or 0, rt = tonumber(c[16]) or 0}
end

-- Retention (api.md, "Retention, replace and debounce"). A message that
-- ends (ack, cancel) while its queue's `rt` (retain_ms, in cfg; absent: 0)
-- is above 0 is kept without its payload until NOW + rt (`until`, fixed at
-- the end): its record, state 'A' or 'C', ended_at and until set,
-- lease_until, lease id and died_at cleared, is the value of the key
-- `TAGP rt:<id>` (not a field of msg: Redis 7.0 has no TTL on hash
-- fields), and `TAGP retained` (zset: score until, member id) lists it.
-- Whether a record is still retained is decided by comparing its until
-- with the call's NOW, so the id is free exactly at until whatever Redis
-- has done with the key. Promotion (every node's timer and sweep) deletes
-- the records whose until has passed (`forget_retained`); the key also
-- expires by itself rt + RETAIN_MARGIN ms of Redis's time after it was
-- written, a relative TTL (the nodes' clocks are never compared with
-- Redis's), so Redis frees a record no sweep reaches (a shard orphaned by
-- a crash). The margin keeps that TTL from ending a window early for a
-- node whose clock lags the ending node's, or whose clock is a test's.
local RETAIN_MARGIN = 60000
local function rkey(id) return TAGP .. 'rt:' .. id end

-- The queue's retain_ms, for calls that did not read cfg.
local function retain_ms()
  return tonumber(redis.call('HGET', K_CFG, 'rt')) or 0
end

-- The retained record of `id` whose window has not passed at NOW, or nil.
local function load_retained(id)
  local v = redis.call('GET', rkey(id))
  if not v then return nil end
  local r = unpack_record(v)
  if r[UN] == '' or r[UN] <= NOW then return nil end
  r[EA] = r[DA] - r[EA]
  return r
end

-- Deletes up to PROMOTE_LIMIT retained records whose until has passed
-- (the first ranks of the index).
local function forget_retained()
  local gone = redis.call('ZRANGEBYSCORE', K_RET, '-inf', s(NOW), 'LIMIT', 0, PROMOTE_LIMIT)
  if #gone == 0 then return end
  for i = 1, #gone, 400 do
    local batch = {}
    for j = i, math.min(i + 399, #gone) do batch[#batch + 1] = rkey(gone[j]) end
    redis.call('DEL', unpack(batch))
  end
  redis.call('ZREMRANGEBYRANK', K_RET, 0, #gone - 1)
end

-- Keeps the record `r` of `id`, which just ended as `how` ('A' acked, 'C'
-- cancelled) and is already gone from msg and every index, for `rt` ms
-- (nothing when rt is 0).
local function retain(id, r, how, rt)
  if not rt or rt <= 0 then return end
  local until_ = NOW + rt
  -- The history goes on with the retained record (without retention it
  -- ends with the message).
  if how == 'A' then record(r, EV_ACKED, NOW) else record(r, EV_CANCELLED, NOW) end
  -- A successor ends with the message (a cancel drops it).
  r[ST], r[PL], r[LU], r[LI], r[DD], r[EN], r[UN], r[SU] = how, '', '', '', '', NOW, until_, ''
  redis.call('SET', rkey(id), pack(r) .. tail(r), 'PX', s(rt + RETAIN_MARGIN))
  redis.call('ZADD', K_RET, s(until_), id)
end

local function paused(c)
  if c.pu == '' then return false end
  if c.pu == 'inf' then return true end
  return tonumber(c.pu) > NOW
end

-- The exact state of a loaded record (see "State" above).
local function state_of(id, r)
  if r[ST] == 'S' and not redis.call('ZSCORE', K_SCHED, smember(r, id)) then return 'R' end
  return r[ST]
end

-- Appends the id and the record's fields in stored order, with the state
-- `st` (resolved when not given).
local function append_record(out, id, r, st)
  local n = #out
  out[n + 1] = id
  for i = 1, RFIELDS do out[n + 1 + i] = r[i] end
  out[n + 1 + ST] = st or state_of(id, r)
end

-- ZADD of many (score, member) pairs, in chunks that Lua's unpack takes.
local function zadd_all(key, pairs)
  for i = 1, #pairs, 400 do
    redis.call('ZADD', key, unpack(pairs, i, math.min(i + 399, #pairs)))
  end
end

-- min(max, initial * multiplier^(attempt-1)) plus 0-10% jitter. The jitter
-- is derived from a per-call seed and the seq, so messages failing together
-- spread out (math.random is reseeded identically on every call).
local function backoff(c, attempt, seq)
  local raw = c.ri * (c.rm ^ math.min(math.max(attempt - 1, 0), 1000))
  local base = c.rx
  if raw == raw and raw < c.rx then base = math.floor(raw) end
  local jitter = math.floor(base / 10)
  if jitter == 0 then return base end
  local r = ((SEED + (seq % 1000003) * 7919) % 1000003) / 1000003
  return base + math.floor(jitter * r + 0.5)
end

-- Removes the message from its state's sorted set. A pending record may be
-- in sched or, promoted, in ready.
local function unlink(id, r)
  local st = r[ST]
  if st == 'S' or st == 'R' then
    if redis.call('ZREM', K_SCHED, smember(r, id)) == 0 and r[KY] ~= '' then
      -- A ready message of a key leaves: the key's next parked one may
      -- go (lua/flow.lua); or it was parked itself.
      if redis.call('ZREM', K_READY, rmember(r[DA], r[SK], id)) == 1 then
        key_wake(r[KY])
      else
        unpark_one(id, r)
      end
    elseif r[KY] == '' then
      redis.call('ZREM', K_READY, rmember(r[DA], r[SK], id))
    end
  elseif st == 'L' then redis.call('ZREM', K_LEASE, member(r, id))
  elseif st == 'D' then redis.call('ZREM', K_DEAD, member(r, id)) end
end

-- Indexes the message as ready or scheduled by its deliver_at (the caller
-- saves the record).
local function place(id, r)
  if r[DA] <= NOW then
    redis.call('ZADD', K_READY, s(r[PR]), rmember(r[DA], r[SK], id))
    r[ST] = 'R'
    return 'R'
  end
  redis.call('ZADD', K_SCHED, s(r[DA]), smember(r, id))
  r[ST] = 'S'
  return 'S'
end

local function to_dead(id, r, at)
  r[ST], r[DD], r[LU], r[LI] = 'D', at, '', ''
  r[BU] = r[BU] + 1
  redis.call('ZADD', K_DEAD, s(at), member(r, id))
end

-- Puts the content of `su` (a successor, or a replace's request in the
-- same shape) on the record `r` of `id`, out of every index (its flow key
-- too: `key_moved` moves its counts).
local function apply_content(id, r, su)
  key_moved(id, r, su[S_KY])
  r[PL], r[HD], r[PR], r[MA], r[LM] = su[S_PL], su[S_HD], su[S_PR], su[S_MA], su[S_LM]
end

-- The lease of `r` ended in a retry (its deliver_at set, not yet
-- indexed): its successor, if any, gives it its content, and it is due at
-- the later of the retry and the successor's due time.
local function successor_retry(id, r)
  local su = r[SU]
  if su == '' then return end
  r[SU] = ''
  apply_content(id, r, su)
  r[DA] = math.max(r[DA], su[S_DA])
end

-- The lease of `r` ended in its death at `at` (dead, indexed and its
-- event recorded): its successor, if any, takes its place: pending again
-- with the successor's content and due time, attempts and deferrals 0,
-- and a `redriven` event. Returns the state.
local function successor_redrive(id, r, at)
  local su = r[SU]
  if su == '' then return r[ST] end
  r[SU] = ''
  redis.call('ZREM', K_DEAD, member(r, id))
  apply_content(id, r, su)
  r[DA], r[AT], r[DF], r[DD] = su[S_DA], 0, 0, ''
  local st = place(id, r)
  record(r, EV_REDRIVEN, at)
  return st
end

-- A failed delivery of a leased message (nack or expired lease): dead when
-- out of attempts, else scheduled again `delay` (or the backoff) after
-- `from`; then its successor, if any, takes effect. Saves the record and
-- returns the new state.
local function fail(c, id, r, from, delay, may_die, new_pr, timed_out)
  local ma = c.ma
  if r[MA] ~= '' then ma = r[MA] end
  if new_pr then r[PR] = new_pr end
  redis.call('ZREM', K_LEASE, member(r, id))
  r[LU], r[LI] = '', ''
  -- A failure ends a run of deferrals.
  r[DF] = 0
  if timed_out then r[CT] = r[CT] + 1 else r[RL] = r[RL] + 1 end
  if may_die and ma ~= 0 and r[AT] >= ma then
    to_dead(id, r, from)
    record(r, EV_DEAD, from, DIED_ATTEMPTS)
    local st = successor_redrive(id, r, from)
    save(id, r)
    return st
  end
  local d = delay or backoff(c, r[AT], r[SK])
  r[DA] = from + d
  successor_retry(id, r)
  local st = place(id, r)
  save(id, r)
  return st
end

-- Idempotent promotion: expired leases follow the failure path (backoff
-- counted from the expiry), then due scheduled messages become ready.
-- Racing nodes are harmless: a member moved by one call is gone for the next.
-- Returns the deliver_at of each promoted message and how many expired.
local function promote(c)
  local fired, expired = {}, 0
  local exp = redis.call('ZRANGEBYSCORE', K_LEASE, '-inf', s(NOW), 'LIMIT', 0, PROMOTE_LIMIT)
  for _, m in ipairs(exp) do
    local id = m:sub(9)
    local r = load(id)
    record(r, EV_EXPIRED, r[LU])
    fail(c, id, r, r[LU], nil, true, nil, true)
    expired = expired + 1
  end
  -- Due members move without loading their records: the sched member and
  -- score carry everything the ready member needs. They are the first
  -- ranks of sched (lowest scores), so one ZREMRANGEBYRANK removes them.
  flow_promote()
  local due = redis.call('ZRANGEBYSCORE', K_SCHED, '-inf', s(NOW), 'WITHSCORES', 'LIMIT', 0, PROMOTE_LIMIT)
  if #due == 0 then return fired, expired end
  redis.call('ZREMRANGEBYRANK', K_SCHED, 0, #due / 2 - 1)
  local ready, readied = {}, {}
  -- On a queue with flow, each record is read for its key: a message of a
  -- key that waits for a wake-up joins its park (lua/flow.lua).
  local flow = flow_cfg()
  for j = 1, #due, 2 do
    local m, da = due[j], tonumber(due[j + 1])
    local pr, rm = s(struct.unpack('>I4', m, 9)), struct.pack('>I8', da) .. m:sub(1, 8) .. m:sub(13)
    local parked = false
    if flow then
      local r = load(m:sub(13))
      -- A holder of its key never waits in a park: it is the key's next.
      parked = r and r[KY] ~= '' and not holds(r) and park_new(r[KY], pr, rm, readied)
    end
    if not parked then
      ready[#ready + 1] = pr
      ready[#ready + 1] = rm
    end
    fired[#fired + 1] = da
  end
  zadd_all(K_READY, ready)
  return fired, expired
end

-- The earliest wall time at which this shard changes by itself: the next
-- scheduled message, lease expiry, end of a timed pause or schedule cursor
-- ('' if none). Cursors already due are left out: the promote reply lists
-- them for firing, and one whose fire keeps failing is retried by the
-- sweep rather than by a timer armed in the past over and over.
local function next_due(c)
  local best = nil
  local a = redis.call('ZRANGE', K_SCHED, 0, 0, 'WITHSCORES')
  if a[2] then best = tonumber(a[2]) end
  local f = redis.call('ZRANGE', K_CURSORS, '(' .. s(NOW), '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  if f[2] and (not best or tonumber(f[2]) < best) then best = tonumber(f[2]) end
  local b = redis.call('ZRANGE', K_LEASE, 0, 0, 'WITHSCORES')
  if b[2] and (not best or tonumber(b[2]) < best) then best = tonumber(b[2]) end
  if c and c.pu ~= '' and c.pu ~= 'inf' then
    local pu = tonumber(c.pu)
    if pu > NOW and (not best or pu < best) then best = pu end
  end
  best = flow_next(best)
  if best then return s(best) end
  return ''
end

-- Looks a leased message up for ack/nack/bury/extend: returns nil and the
-- record when it is the current lease, else the status word.
local function check_lease(id, lid)
  local r = load(id)
  if not r then return 'NF' end
  if r[ST] ~= 'L' or r[LI] ~= lid then return 'LM' end
  return nil, r
end

-- Indexes the new record `r` of `id` (stored, not yet indexed) by its
-- deliver_at: due now, it is ready (or joins its key's park, `park_new`
-- with `readied`), else scheduled. The index entries are appended to
-- `sched` and `ready` (score, member pairs) for the caller's ZADDs.
-- Returns the state.
local function index_new(id, r, readied, sched, ready)
  if r[DA] > NOW then
    sched[#sched + 1] = s(r[DA])
    sched[#sched + 1] = smember(r, id)
    return 'S'
  end
  local m = rmember(r[DA], r[SK], id)
  if not (r[KY] ~= '' and park_new(r[KY], r[PR], m, readied)) then
    ready[#ready + 1] = s(r[PR])
    ready[#ready + 1] = m
  end
  return 'R'
end

-- A new live record: seq `seq`, enqueued at NOW, the content and due time
-- of `su` (a request or a successor, in the successor's shape).
local function new_record(seq, su)
  return {seq, 'S', su[S_DA], NOW, su[S_PR], su[S_PL], su[S_HD], 0, su[S_MA], su[S_LM],
    '', '', '', 0, 0, 0, 0, su[S_KY], 0}
end

-- The due time a replace (`oc` 'r') or debounce ('d', capped at `since`
-- plus `mx`, when given) of request due at `da` gives.
local function capped(oc, da, mx, since)
  if oc == 'd' and mx then return math.min(da, since + mx) end
  return da
end

-- A replace or debounce (`oc`, cap `mx`) with the request `q` (in the
-- successor's shape, its due time uncapped) of the live message `id`
-- (record `r`): a waiting message takes its content and due time at once
-- (its seq, attempts and enqueued_at stay); a leased one keeps it as its
-- successor (overwriting an earlier one, whose `since` stays); a dead one
-- is not changed. Returns the answer's code (2 replaced, 3 successor, 4
-- dead), deliver_at and state.
local function replace_live(id, r, q, oc, mx)
  local st = r[ST]
  if st == 'D' then return 4, r[DA], 'D' end
  if st == 'L' then
    local since = NOW
    if r[SU] ~= '' then since = r[SU][S_SI] end
    q[S_DA], q[S_SI] = capped(oc, q[S_DA], mx, since), since
    r[SU] = q
    record(r, EV_REPLACED, NOW, 1)
    save(id, r)
    return 3, q[S_DA], 'L'
  end
  unlink(id, r)
  apply_content(id, r, q)
  r[DA] = capped(oc, q[S_DA], mx, r[EA])
  st = place(id, r)
  record(r, EV_REPLACED, NOW, 0)
  save(id, r)
  -- A holder of its key that moved (in order, or to this key) may make
  -- another holder its key's next, or stop being it (lua/flow.lua, ph).
  if r[KY] ~= '' and holds(r) then key_wake(r[KY]) end
  return 2, r[DA], st
end

-- Enqueues the groups of 11 arguments from ARGV[from] on: id, seq,
-- deliver_at, priority, max_attempts ('' = queue's), lease_ms ('' =
-- queue's), headers (opaque), payload, flow key ('' = none), on_conflict
-- ('' keep, 'r' replace, 'd' debounce), debounce_max_ms ('' = none); seqs
-- increase along the groups.
-- Returns {'OK', code, seq, deliver_at, state, ...} per item (code 0: the
-- id was taken, nothing changed; 1: created; 2: replaced; 3: kept as the
-- leased message's successor, deliver_at the successor's; 4: a dead
-- message, not replaced), or {'SEQ'} when the first seq is not above the
-- last one this shard issued (`sl` in cfg), so that seqs increase per
-- queue shard whichever node enqueues: the caller takes fresh seqs from
-- the deployment's counter and calls again.
-- New records are stored with HSETNX (an existing id keeps its message:
-- idempotent enqueue, unless the item replaces), and the call's index
-- entries go in one ZADD per set (written before a replace, which may
-- concern an id this call created).
-- A retained id (still within its window at NOW) is taken as well for
-- `keep`: its answer is the retained message's, state 'A' or 'C'; a
-- replace or debounce deletes the retained record and creates a new
-- message. Its record is looked for only while the shard retains anything
-- (one EXISTS per call).
local function enqueue_items(c, from)
  if ARGV[from + 1] and tonumber(ARGV[from + 1]) <= c.sl then return {'SEQ'} end
  local last = c.sl
  local out = {'OK'}
  local sched, ready, readied = {}, {}, {}
  -- Ids created by this call, with their state: their index entries are
  -- not written yet when the same id comes again later in the call.
  local created = {}
  local retaining = redis.call('EXISTS', K_RET) == 1
  for i = from, #ARGV, 11 do
    local id, oc = ARGV[i], ARGV[i + 9]
    -- Debounce caps the due time at enqueued_at + debounce_max_ms, also
    -- for the message it creates (enqueued NOW).
    local da, mx = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 10])
    if oc == 'd' and mx then da = math.min(da, NOW + mx) end
    local q = {ARGV[i + 7], ARGV[i + 6], tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4]) or '',
      tonumber(ARGV[i + 5]) or '', ARGV[i + 8], da, NOW}
    local r = new_record(tonumber(ARGV[i + 1]), q)
    local n = #out
    -- A live id has no retained record in its window (one is written only
    -- when the live message ends, and a new one waits for the window).
    local kept = retaining and not created[id] and load_retained(id)
    if kept and oc ~= '' then
      redis.call('DEL', rkey(id))
      redis.call('ZREM', K_RET, id)
      kept = nil
    end
    if kept then
      out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 0, kept[SK], kept[DA], kept[ST]
    elseif redis.call('HSETNX', K_MSG, id, pack(r) .. ENQUEUED_TAIL) == 0 then
      if oc == '' then
        local ex = load(id)
        out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 0, ex[SK], ex[DA], created[id] or state_of(id, ex)
      else
        -- The index entries so far go first (the id may be among them),
        -- and what this call made ready is forgotten: the replace may have
        -- moved it.
        zadd_all(K_SCHED, sched)
        zadd_all(K_READY, ready)
        sched, ready, readied, created[id] = {}, {}, {}, nil
        local ex = load(id)
        local code, due, st = replace_live(id, ex, q, oc, mx)
        out[n + 1], out[n + 2], out[n + 3], out[n + 4] = code, ex[SK], due, st
      end
    else
      last = r[SK]
      if r[KY] ~= '' then key_added(id, r[KY]) end
      local st = index_new(id, r, readied, sched, ready)
      out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 1, r[SK], r[DA], st
      created[id] = st
    end
  end
  zadd_all(K_SCHED, sched)
  zadd_all(K_READY, ready)
  if last > c.sl then redis.call('HSET', K_CFG, 'sl', s(last)) end
  return out
end

-- Stores a schedule record (JSON, opaque here) and its cursor ('' = none),
-- or deletes both when the record is ''.
local function store_schedule(sid, record, cursor)
  if record == '' then
    redis.call('HDEL', K_SCHEDULES, sid)
    redis.call('ZREM', K_CURSORS, sid)
    return
  end
  redis.call('HSET', K_SCHEDULES, sid, record)
  if cursor == '' then
    redis.call('ZREM', K_CURSORS, sid)
  else
    redis.call('ZADD', K_CURSORS, cursor, sid)
  end
end

-- The ids of schedules whose cursor is due at NOW (at most `limit`).
local function due_schedules(limit)
  return redis.call('ZRANGE', K_CURSORS, '-inf', s(NOW), 'BYSCORE', 'LIMIT', 0, limit)
end
