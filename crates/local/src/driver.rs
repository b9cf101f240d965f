//! The driver task: fires timers (scheduled → ready, leases running out)
//! and moves the horizon, loading the next stretch of the `due` index.
//!
//! # Time
//! Timers carry wall-clock deadlines (`deliver_at`, `lease_until`) but run on
//! a timing wheel driven by a monotonic clock (see `timers`). A timer fires
//! only when the injected wall clock has reached its deadline, so nothing
//! fires early by wall time. The task sleeps (tokio's monotonic clock) until
//! the wheel's next deadline, but never longer than [`MAX_SLEEP`], and each
//! round re-reads the wall clock:
//! - wall clock jumps backwards: entries the wheel fires before their wall
//!   deadline are re-armed for the remaining time;
//! - wall clock jumps forwards: within `MAX_SLEEP` the wheel's time jumps
//!   with it and what is due fires, in (deadline, seq) order.
//!
//! A new timer earlier than the one waited for wakes the task at once.
//!
//! Schedules sit in the same timers, one entry per schedule at its cursor;
//! a due one fires here (`fire`), with no polling of schedules.

use std::sync::Arc;
use std::time::Duration;

use delayd_core::{metric, BrokerError, BrokerResult};

use crate::broker::Inner;
use crate::codec;
use crate::lock::Site;
use crate::state::{State, TimerTarget, Tx};
use crate::store::Store;

/// Longest wait between looks at the wall clock.
pub(crate) const MAX_SLEEP: Duration = Duration::from_millis(100);
/// Most timers fired per lock hold.
const FIRE_BATCH: usize = 4096;
/// How long a round fires timers before it serves the waiting lease calls
/// and releases the lock: a waiter gets its message after at most this
/// much firing, and no round holds the state lock for long (4,096 timers
/// per round held it for tens of milliseconds in a burst; 256 per round
/// handed a burst out in small lots, one consumer round trip each;
/// docs/BENCHMARKS.md).
const FIRE_BUDGET: Duration = Duration::from_micros(500);
/// Timers fired between two looks at the clock.
const FIRE_STRIDE: usize = 32;
/// How long a burst (more timers due than a round fires) is fired, round
/// after round with the lock released between, before the waiting lease
/// calls are served: each waiter then gets up to its `max` at once, rather
/// than one round's worth and a consumer round trip for each next lot.
const BURST_GATHER: Duration = Duration::from_millis(25);
/// `due` entries loaded per lock hold.
pub(crate) const LOAD_BATCH: usize = 4096;

/// Pause after a failed round before the next (after a failed write the
/// sync thread is reopening the engine meanwhile).
const FAILED_ROUND_PAUSE: Duration = Duration::from_secs(1);

/// How often the block cache gauges are refreshed.
const CACHE_SAMPLE_EVERY: Duration = Duration::from_secs(1);

pub(crate) async fn run(inner: Arc<Inner>) {
    let mut cache_sampled: Option<std::time::Instant> = None;
    // When the burst of due timers being fired began (see BURST_GATHER).
    let mut burst: Option<std::time::Instant> = None;
    loop {
        inner.disk.sample_if_stale();
        if cache_sampled.is_none_or(|at| at.elapsed() >= CACHE_SAMPLE_EVERY) {
            cache_sampled = Some(std::time::Instant::now());
            let (cached, capacity) = inner.store.cache_usage();
            metrics::gauge!(metric::STORAGE_CACHE_BYTES).set(cached as f64);
            metrics::gauge!(metric::STORAGE_CACHE_CAPACITY_BYTES).set(capacity as f64);
        }
        let held = inner.driver_held.load(std::sync::atomic::Ordering::Relaxed);
        let wait = match if held {
            Ok(None)
        } else {
            inner.drive_once(&mut burst).map(Some)
        } {
            // Held (a test hook): no round, and no busy loop on due timers.
            Ok(None) => MAX_SLEEP,
            Ok(Some(true)) => Duration::ZERO,
            Ok(Some(false)) => inner.next_wait(),
            Err(RoundError::Heal(e)) => {
                tracing::error!(error = %e, "driver round failed: store failure");
                inner.poison(e.to_string());
                FAILED_ROUND_PAUSE
            }
            // A read that fails (a damaged block, the engine closed while
            // the sync thread reopens it) is retried; reopening would not
            // mend a damaged block, and writes go on meanwhile.
            Err(RoundError::Read(e)) => {
                tracing::error!(error = %e, "driver round failed reading the store; retrying");
                FAILED_ROUND_PAUSE
            }
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = inner.driver_wake.notified() => {}
            () = inner.stopped() => return,
        }
    }
}

/// What a round of firing did.
struct Fired {
    count: usize,
    /// It stopped at its limit or its time, with timers possibly still due.
    limited: bool,
}

/// Why a driver round failed.
pub(crate) enum RoundError {
    /// A failed write (the open group's flush before the scan) or memory
    /// that disagrees with itself: the engine is reopened and memory
    /// rebuilt from disk.
    Heal(crate::error::StoreError),
    /// A failed read of the engine: retried next round.
    Read(crate::error::StoreError),
}

impl Inner {
    /// One round: fire what is due, load the horizon. True when work is
    /// left over for an immediate next round.
    fn drive_once(&self, burst: &mut Option<std::time::Instant>) -> Result<bool, RoundError> {
        let started = std::time::Instant::now();
        let mut state = self.lock_state(Site::Driver);
        let now = self.clock.now_ms();
        let mut tx = Tx::default();
        let fired = self.fire_due(
            &mut state,
            now,
            FIRE_BATCH,
            Some(std::time::Instant::now() + FIRE_BUDGET),
            &mut tx,
        )?;
        let more_to_load = match horizon_target(&mut state, now, self.horizon_ms) {
            Some(target) => {
                // The write half of the horizon scan, done here so that its
                // failure is told from a failed read. Only when a scan
                // follows: a flush empties the open group into the engine
                // as a batch of its own, and leases then wait for fsyncs
                // they would not need (`State::write_pending`).
                state.flush_pending(&self.store).map_err(RoundError::Heal)?;
                load_horizon_chunk(&mut state, &self.store, target, now, &mut tx)
                    .map_err(RoundError::Read)?
            }
            None => false,
        };
        let gathering = fired.limited
            && burst.get_or_insert_with(std::time::Instant::now).elapsed() < BURST_GATHER;
        if !fired.limited {
            *burst = None;
        }
        if gathering {
            // Served once the burst is fired (or has taken its time): the
            // queues with ready messages are found again then, below.
            tx.ready_queues.clear();
        } else {
            // Also wakes the waiters of a timed pause that ended: look at
            // every queue someone waits on (few; O(1) when nobody waits).
            let ready: Vec<_> = state
                .waiters
                .queues()
                .filter(|q| state.first_ready(std::slice::from_ref(*q), now).is_some())
                .cloned()
                .collect();
            for queue in &ready {
                tx.note_ready(queue);
            }
        }
        let (_, handed) = self.absorb_counted(&mut state, tx, now);
        drop(state);
        if fired.count > 0 || handed > 0 {
            metrics::histogram!(metric::DRIVER_ROUND_SECONDS)
                .record(started.elapsed().as_secs_f64());
            metrics::histogram!(metric::DRIVER_ROUND_FIRED).record(fired.count as f64);
            metrics::histogram!(metric::DRIVER_ROUND_HANDED).record(handed as f64);
        }
        Ok(fired.limited || more_to_load)
    }

    fn next_wait(&self) -> Duration {
        self.lock_state(Site::Driver).timers.next_wait(MAX_SLEEP)
    }

    /// Fires up to `limit` timers due at `now`, in (deadline, seq) order,
    /// and none after `until` passed: a due message becomes ready, a lease
    /// that ran out fails (as of its deadline), a due schedule fires.
    fn fire_due(
        &self,
        state: &mut State,
        now: u64,
        limit: usize,
        until: Option<std::time::Instant>,
        tx: &mut Tx,
    ) -> Result<Fired, RoundError> {
        let mut fired = 0;
        // Looked up once a round, not per message: the stage's histogram,
        // and the queue's (rounds are mostly one queue's).
        let ready = metric::Lateness::of(metric::Stage::Ready);
        let mut per_queue: Option<(delayd_core::QueueName, metrics::Histogram)> = None;
        let limited = loop {
            let out_of_time = fired % FIRE_STRIDE == 0
                && fired > 0
                && until.is_some_and(|until| std::time::Instant::now() >= until);
            if fired >= limit || out_of_time {
                break true;
            }
            let Some((_seq, deadline, target)) = state.timers.poll_expired(now) else {
                break false;
            };
            fired += 1;
            let (queue, id) = match target {
                TimerTarget::Message(queue, id) => (queue, id),
                TimerTarget::Schedule(queue, id) => {
                    self.fire_schedule(state, &queue, &id, now, tx)
                        .map_err(RoundError::Heal)?;
                    continue;
                }
                flow @ (TimerTarget::FlowKey(..) | TimerTarget::FlowQueue(_)) => {
                    state.flow_timer_fired(flow);
                    continue;
                }
            };
            if state.make_ready(&queue, &id, tx) {
                ready.record(now, deadline);
                let lateness = now.saturating_sub(deadline) as f64 / 1000.0;
                match &per_queue {
                    Some((q, histogram)) if *q == queue => histogram.record(lateness),
                    _ => {
                        let histogram = metrics::histogram!(metric::FIRE_LATENESS_SECONDS, "queue" => queue.to_string());
                        histogram.record(lateness);
                        per_queue = Some((queue, histogram));
                    }
                }
            } else if let Err(e) = state.expire_lease(&queue, &id, deadline, now, tx) {
                return Err(RoundError::Heal(crate::error::StoreError::Corrupt(
                    e.to_string(),
                )));
            }
        };
        Ok(Fired {
            count: fired,
            limited,
        })
    }

    /// Loads the horizon while messages due by `now` may be on disk only
    /// (the driver, which keeps the horizon loaded well ahead, has fallen
    /// behind), so that their timers are there to fire.
    fn load_due(&self, state: &mut State, now: u64, tx: &mut Tx) -> Result<(), RoundError> {
        while state.horizon.behind(now) {
            state.flush_pending(&self.store).map_err(RoundError::Heal)?;
            let more = load_horizon_step(state, &self.store, now, self.horizon_ms, tx)
                .map_err(RoundError::Read)?;
            if !more {
                break;
            }
        }
        Ok(())
    }

    /// Settles time at a call (issue 31): before the call acts, everything
    /// due at its `now` is applied, as the driver would have: messages
    /// become ready (loaded from disk first if the horizon fell behind),
    /// expired leases fail, due schedules fire. So a call
    /// never sees a lease that ran out as current, or a cursor that is due
    /// as pending, whether or not the driver has had its round.
    ///
    /// A call only catches up; it wakes no waiting lease call: the queues
    /// that became ready are left to the driver (woken here), which serves
    /// their waiters in its round. Leaves the state as the driver would,
    /// its writes joined to the open group (waited for by the call's own
    /// ticket, which is later).
    pub(crate) fn catch_up(&self, state: &mut State, now: u64) -> BrokerResult<()> {
        let mut tx = Tx::default();
        let fired = self
            .load_due(state, now, &mut tx)
            .and_then(|()| self.fire_due(state, now, usize::MAX, None, &mut tx));
        let became_ready = !std::mem::take(&mut tx.ready_queues).is_empty();
        tx.wake_driver |= became_ready;
        self.absorb_locked(state, tx, now);
        match fired {
            Ok(_) => Ok(()),
            Err(RoundError::Heal(e)) => {
                tracing::error!(error = %e, "settling time at a call failed: store failure");
                self.poison(e.to_string());
                Err(BrokerError::unavailable(format!(
                    "store refuses writes: {e}"
                )))
            }
            Err(RoundError::Read(e)) => Err(BrokerError::unavailable(format!(
                "reading the store failed: {e}"
            ))),
        }
    }
}

/// Advances the horizon watermark by at most [`LOAD_BATCH`] messages.
/// Starts a new stretch when less than half the horizon is loaded. True
/// when the stretch is not finished.
pub(crate) fn load_horizon_step(
    state: &mut State,
    store: &Store,
    now: u64,
    horizon_ms: u64,
    tx: &mut Tx,
) -> Result<bool, crate::error::StoreError> {
    match horizon_target(state, now, horizon_ms) {
        Some(target) => load_horizon_chunk(state, store, target, now, tx),
        None => Ok(false),
    }
}

/// Which scheduled messages are in memory: those whose (deliver_at, seq)
/// is below the watermark; the others are on disk only, in the `due`
/// index, until the loader reaches them. The watermark only moves forward,
/// by whole chunks of the `due` index loaded in order.
#[derive(Default)]
pub(crate) struct Horizon {
    /// The watermark.
    loaded: (u64, u64),
    /// Where the stretch being loaded ends (None: not loading).
    loading_to: Option<u64>,
}

impl Horizon {
    /// Whether a scheduled message due at (`deliver_at`, `seq`) belongs in
    /// memory.
    pub fn holds(&self, deliver_at: u64, seq: u64) -> bool {
        (deliver_at, seq) < self.loaded
    }

    /// Whether messages due by `now` may still be on disk only (the loader
    /// fell behind).
    fn behind(&self, now: u64) -> bool {
        self.loaded.0 <= now
    }

    /// Where the stretch being loaded ends, if the horizon needs loading
    /// (a stretch is under way, or less than half the horizon is loaded).
    fn target(&mut self, now: u64, horizon_ms: u64) -> Option<u64> {
        match self.loading_to {
            Some(target) => Some(target),
            None if self.loaded.0 <= now.saturating_add(horizon_ms / 2) => {
                let target = now.saturating_add(horizon_ms);
                self.loading_to = Some(target);
                Some(target)
            }
            None => None,
        }
    }

    /// The message at (`deliver_at`, `seq`) of the `due` index was loaded.
    fn loaded_through(&mut self, deliver_at: u64, seq: u64) {
        self.loaded = (deliver_at, seq.saturating_add(1));
    }

    /// The stretch ending at `target` is loaded whole.
    fn finished(&mut self, target: u64) {
        self.loaded = self.loaded.max((target, 0));
        self.loading_to = None;
    }
}

/// Where the stretch being loaded ends, if the horizon needs loading.
fn horizon_target(state: &mut State, now: u64, horizon_ms: u64) -> Option<u64> {
    state.horizon.target(now, horizon_ms)
}

/// Loads up to [`LOAD_BATCH`] messages of the stretch ending at `target`.
fn load_horizon_chunk(
    state: &mut State,
    store: &Store,
    target: u64,
    now: u64,
    tx: &mut Tx,
) -> Result<bool, crate::error::StoreError> {
    // The scan must see the open group's `due` writes.
    state.flush_pending(store)?;
    let chunk = store.due_range(state.horizon.loaded, target, LOAD_BATCH)?;
    for (at, seq, key) in &chunk {
        let (queue, _) = codec::decode_message_key(key)?;
        if let Some(rec) = store.message(key)? {
            state.load(&queue, rec, now, tx);
        }
        state.horizon.loaded_through(*at, *seq);
    }
    if chunk.len() < LOAD_BATCH {
        state.horizon.finished(target);
        return Ok(false);
    }
    Ok(true)
}
