//! delayd's history checker: one checker for every history a fault test
//! records (the seeded explorer, the kill -9 tests, the soak with faults,
//! the Redis failover and partition tests), verifying every promise of
//! api.md on it (issue 40, after Jepsen's Elle and TigerBeetle's VOPR).
//!
//! # Layout
//! - `op`: the operations of a history ([`Op`]) and the JSON-lines file
//!   format ([`History::read`], [`History::write`]).
//! - `index`: the history indexed per message (one seq) and per queue.
//! - `lost`: acknowledged enqueues lost, acknowledged ends undone.
//! - `delivery`: each message's deliveries in order: early, duplicate,
//!   ack after expiry, attempts, deferrals.
//! - `flow`: concurrency, key_concurrency, rate, key_rate, ordered keys
//!   (`flow/ordered.rs`).
//! - `schedule`: fire times at most once, none missed.
//! - `report`: [`Report`], [`Violation`], [`Property`], [`CheckConfig`].
//! - `model`: a small reference broker that records valid histories (the
//!   property tests' and the benchmark's source).
//!
//! # The history
//! A history is a file of JSON lines, one operation each, in any order:
//! `{"op": "<kind>", "invoke": ms, "complete": ms, ...}`. `invoke` is when
//! the client sent the call, `complete` when it had the answer, both on
//! the client's one clock; the server did what the call asked somewhere
//! in between. `outcome` is what the answer said: `ok` (it took effect),
//! `error` (refused, nothing changed), `lease_mismatch`, `not_found`, or
//! `unknown` (no answer, a 5xx, a timeout: it may or may not have taken
//! effect). The kinds (fields besides the times; see [`Op`]):
//!
//! | op | fields | what it records |
//! |---|---|---|
//! | `queue_config` | queue, outcome, max_attempts, retry, flow | the queue's config after a `PUT` (flow as in api.md: concurrency, key_concurrency, rate / key_rate `{limit, period_ms, burst}`, ordered, max_deferrals) |
//! | `enqueue` | queue, id, outcome, exists, seq, deliver_at, key, priority | one enqueue (a batch is one line per item); `exists` is 200 `created: false` |
//! | `lease` | queue, id, seq, attempt, lease_id, lease_until, deliver_at, key, granted_at | one message handed out (a lease call is one line per message) |
//! | `lease_failed` | queue | a lease call whose answer was lost: it may have handed out messages nobody saw |
//! | `ack`, `bury` | queue, id, lease_id, outcome | a call on one lease |
//! | `nack` | queue, id, lease_id, outcome, defer, delay_ms | |
//! | `extend` | queue, id, lease_id, outcome, lease_until | |
//! | `cancel` | queue, id, outcome | |
//! | `reschedule` | queue, id, outcome, deliver_at | |
//! | `redrive`, `delete_queue` | queue, outcome | |
//! | `crash` | ends_leases (default true), maybe | the server died within the span (`maybe`: it may have, as an in-process reopen after a failed write) |
//! | `restart` | | the server answered again (its readiness) |
//! | `schedule` | queue, schedule, action (`put`, `pause`, `resume`, `delete`), outcome, every | a schedule change; `every` `{every_ms, start_at, end_at, catchup_all, catchup_window_ms, paused}` for an `every_ms` schedule with `overlap: allow` |
//! | `fire` | queue, schedule, fire_at, seq | a fire time's message, as the client saw it (leased or listed) |
//! | `fires_observed` | queue, schedule, through | every fire message with a fire time up to `through` has its `fire` line |
//! | `observe` | queue, id, state (`live`, `dead`, `absent`), seq | a read of one message |
//! | `stop` | at, drained | the run ended; `drained`: consumers consumed everything due |
//!
//! A message is one *instance*: an id's life under one seq (an id enqueued
//! again after an ack is a new instance with a new seq). Leases and
//! enqueues name their seq; calls by lease id reach the instance through
//! their lease; calls by id (cancel, reschedule, observe) reach the
//! instances of the id they may have met (one, unless an enqueue of the id
//! overlaps the call).
//!
//! # Properties
//! Client times are uncertain by the call's own span, and server times
//! (`deliver_at`, `lease_until`, `fire_at`) by [`CheckConfig::slack_ms`]
//! beside. Every rule is conservative: a violation is reported only when
//! no placement of each call within its span, and no outcome of each
//! `unknown` call, explains the history. Unknown calls and crashes
//! therefore only excuse.
//!
//! - **lost**: an acknowledged enqueue (`ok`, not `exists`) read `absent`
//!   while no ack, cancel or queue delete (of any outcome) may have ended
//!   it; and at the `stop`: with `drained`, each one that no call may have
//!   ended, that may not be dead (read dead, buried, or delivered at the
//!   smallest `max_attempts`, default 10), and that was due by the stop
//!   (its `deliver_at`, or its last lease's end: a nack's time plus its
//!   `delay_ms`, else its `lease_until`) is lost; without `drained`, each
//!   one neither (maybe) ended nor (maybe) dead must have been read `live`
//!   or `dead` after its enqueue (it is counted pending), else lost.
//! - **resurrected**: a message read `live` or `dead` after its ack or
//!   cancel was answered `ok`, with no enqueue of its id in between that
//!   may have made it again.
//! - **early**: a delivery answered at `complete` whose due time is later
//!   than `complete + slack`: the `deliver_at` the lease states; the
//!   enqueue's `deliver_at` for a first delivery not rescheduled; after a
//!   nack `ok`, its `invoke + delay_ms` (without `delay_ms`, the queue's
//!   backoff `min(max_ms, initial_ms * multiplier^(n-1))` when every config
//!   of the queue states `retry`); after an expiry, `lease_until` (plus
//!   that backoff). And a `granted_at` before the lease's `deliver_at`
//!   (both server times: no slack). Crashes, redrives, reschedules and
//!   uncertain enqueues of the id in between excuse the retry rules.
//! - **duplicate**: a message delivered again needs a reason between the
//!   previous grant and this answer: a nack or bury of the previous lease
//!   that may have taken effect, its expiry (`lease_until`, moved by each
//!   `ok` extend, at most `complete + slack`), or a crash. Never after an
//!   ack answered `ok` before the new lease call, nor after an `ok` bury
//!   without a redrive.
//! - **seq_reused**: one seq on two (queue, id).
//! - **ack_after_expiry**: an ack, nack, extend or bury answered `ok`
//!   although, when it was invoked, the lease had surely ended: past its
//!   `lease_until` (moved by earlier `ok` extends) plus slack, the message
//!   was delivered again, or a certain crash lay between the grant and
//!   the call.
//! - **attempts**: the first delivery has attempt 1; each next one the
//!   previous attempt +1 after a nack or an expiry, +0 after a deferral or
//!   a bury (then a redrive); a crash in between allows +0 or +1 (api.md:
//!   a lease not yet durable comes back uncounted); each `lease_failed` of
//!   the queue in between allows one more; a redrive or an uncertain
//!   enqueue of the id allows a restart at 1.
//! - **deferral**: the attempts rule after an `ok` nack with `defer`: the
//!   next delivery has the same attempt.
//! - **concurrency**, **key_concurrency**: a lease is surely open from its
//!   answer (`complete`) to the earliest moment it may have ended: any
//!   ack, nack or bury of it (whatever the outcome), `lease_until` (moved
//!   by `ok` extends) minus slack, a crash (maybe or not), a cancel of the
//!   message, a delete of the queue, the message's next lease call. At each
//!   grant the leases surely open together, of the queue and of the key,
//!   are at most the `concurrency` and `key_concurrency` (1 with
//!   `ordered`) of the config surely in effect during the grant's call.
//! - **rate**, **key_rate**: the deliveries made under one config (a
//!   change starts anew; crashes and restarts do not), per queue and per
//!   key: no set of them answered by `c` and invoked from `m` may exceed
//!   `burst + floor((c - m + slack) * limit / period_ms)`. Checked in one
//!   pass as a token bucket (`flow.rs`, `over_rate`).
//! - **order** (ordered queues): a message of a key surely holds it from
//!   its first delivery's answer until the earliest moment it may be done
//!   (an ack, bury or cancel of any outcome, a delivery at the smallest
//!   `max_attempts`, `max_deferrals` deferrals in a row, a redrive or
//!   delete, an uncertain enqueue of the id, or a crash before its failure
//!   was surely durable); no other message of the key is delivered
//!   (invoked after the holder's start, answered before its end). And a
//!   key's first delivery of a message is a violation when another
//!   message of the key, enqueued (`ok`) before the lease call, due by its
//!   invoke minus slack, earlier in (priority, deliver_at, seq), and not
//!   yet handed out, cancelled or deleted, was waiting.
//! - **fire_twice**: two `fire` lines of one schedule's fire time with
//!   different seqs.
//! - **fire_missed** (`every_ms` schedules with `fires_observed`): each
//!   fire time `start_at + k * every_ms` of a stretch from a `put` or
//!   `resume` (`ok`; after its answer plus slack) to before the next change
//!   (less `fire_grace_ms`), before `end_at` and at most `through` (and
//!   `fire_grace_ms` before the observation), must have a `fire` line if
//!   the store was up from it for `fire_grace_ms`; or, when the store was
//!   down at it (a `crash` to the next `restart`), if the restart's
//!   catch-up must enqueue it: within `catchup_window_ms` of the restart
//!   plus grace, and with `latest` the newest fire time by then.
//! - **malformed**: a history that contradicts itself (a created enqueue
//!   without its seq, a call naming a lease no line handed out, a lease id
//!   handed out twice).
//!
//! Checked elsewhere, not here: anything only a server's internal state
//! shows (a slot that outlives its lease shows here only as fewer
//! deliveries, never as a violation; `overlap: skip` and cron schedules'
//! fire times).
//!
//! # Cost
//! Indexing is linear (hash maps by seq, lease id and id); each check
//! sorts what it scans: O(n log n) for n operations, plus, for an ordered
//! key, the waiting messages before a delivered one in order (few unless a
//! key's backlog is both long and out of order). docs/BENCHMARKS.md,
//! "History checker", has the measured time for 1,000,000 operations.

#![forbid(unsafe_code)]

mod delivery;
mod flow;
mod index;
mod lost;
pub mod model;
mod op;
mod report;
mod schedule;

pub use op::{
    Crash, Enqueue, Every, Extend, Fire, FiresObserved, Flow, History, Lease, LeaseCall,
    LeaseFailed, MessageCall, Nack, Observe, Observed, Op, Outcome, QueueCall, QueueConfig, Rate,
    ReadError, Reschedule, Retry, ScheduleAction, ScheduleChange, Span, Stop,
};
pub use report::{CheckConfig, Property, Report, Violation};

/// Checks every property on `history` with the default [`CheckConfig`].
pub fn check(history: &History) -> Report {
    check_with(history, &CheckConfig::default())
}

/// Checks every property on `history`.
pub fn check_with(history: &History, cfg: &CheckConfig) -> Report {
    let mut report = Report {
        ops: history.ops.len(),
        ..Report::default()
    };
    let ix = index::Index::build(&history.ops, &mut report);
    lost::check(&ix, cfg, &mut report);
    delivery::check(&ix, cfg, &mut report);
    flow::check(&ix, cfg, &mut report);
    schedule::check(&history.ops, &ix, cfg, &mut report);
    report.violations.truncate(cfg.max_violations);
    report
}
