//! [`LocalBroker`]: opening and recovery, the call skeleton (lock, change,
//! commit, wait for durability), and shutdown.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delayd_core::{BrokerError, BrokerResult, Clock};
use tokio::sync::{watch, Notify};

use crate::lock::{Site, StateCell, StateGuard};
use tokio::task::JoinHandle;

use crate::config::LocalConfig;
use crate::disk::DiskGuard;
use crate::driver;
use crate::error::OpenError;
use crate::recover::{self, Occasion};
use crate::state::{State, Tx};
use crate::store::Store;
use crate::sync::{SyncSetup, Syncer};
use crate::waiters::Handed;

/// What [`LocalBroker::open`] found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Bytes cut off the end of journal files because the last write was
    /// torn or garbled. Everything before them (every fully committed
    /// batch) was kept.
    pub torn_tail_bytes: u64,
    /// Live messages in the store.
    pub messages_on_disk: u64,
    /// Of those, loaded into memory (due within the horizon, leased, dead).
    pub messages_in_memory: u64,
    /// Messages leased when the previous process stopped; each came back
    /// as an expired lease (a failed attempt, backoff from now).
    pub leases_expired: u64,
    /// Schedules with a cursor (not paused, not finished), each armed in
    /// the timers; those due fire in the driver's first round (catch-up).
    pub schedules_armed: u64,
    pub open_duration: Duration,
}

impl RecoveryReport {
    pub fn torn_tail_detected(&self) -> bool {
        self.torn_tail_bytes > 0
    }
}

/// Commit, fsync and lock counters (benchmarks: messages per fsync;
/// tests: how many lock acquisitions a wake-up costs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Commit groups written to the engine (one batch each).
    pub commits: u64,
    pub fsyncs: u64,
    /// Acquisitions of the broker's state lock since open.
    pub lock_acquisitions: u64,
    /// Lease calls waiting for a message now.
    pub waiting_leases: u64,
}

/// Writes the open commit group may hold before callers wait for it to be
/// written (backpressure; a few MB of keys and values, which the allocator
/// may keep as resident memory after the group is freed).
pub(crate) const MAX_PENDING_OPS: usize = 16_384;

pub(crate) struct Inner {
    cell: Arc<StateCell>,
    pub store: Arc<Store>,
    pub syncer: Syncer,
    pub clock: Arc<dyn Clock>,
    pub horizon_ms: u64,
    pub driver_wake: Notify,
    /// Test hook ([`LocalBroker::hold_driver`]): the driver skips its
    /// rounds while set.
    pub driver_held: AtomicBool,
    stop: watch::Sender<bool>,
    /// Free space of the data directory against the reserve.
    pub disk: DiskGuard,
}

/// The durable, embedded broker. See the crate docs and docs/storage.md.
pub struct LocalBroker {
    pub(crate) inner: Arc<Inner>,
    report: RecoveryReport,
    /// The driver and the retention sweeper (module `retain`), each named:
    /// joined at shutdown, so that no task holds the store (and its lock
    /// file) after it.
    tasks: Mutex<Vec<(&'static str, JoinHandle<()>)>>,
}

impl LocalBroker {
    /// Opens (or creates) the store in `config.data_dir` and recovers the
    /// last durable state. Must be called inside a tokio runtime.
    pub async fn open(config: LocalConfig) -> Result<LocalBroker, OpenError> {
        let started = Instant::now();
        let opened = Store::open(&config.data_dir, config.engine_options()).map_err(|source| {
            OpenError::Store {
                path: config.data_dir.clone(),
                source,
            }
        })?;
        let mut store = opened.store;
        let (state, mut report) = recover::load(
            &store,
            opened.torn_tail_bytes,
            Occasion::Start,
            config.clock.now_ms(),
            config.horizon_ms,
            config.history,
        )?;
        store.arm_faults(Arc::new(crate::fault::from_config(&config)));
        let store = Arc::new(store);
        let cell = Arc::new(StateCell::new(state));
        let setup = SyncSetup {
            dir: config.data_dir.clone(),
            durability: config.durability,
            reopen: recover::reopener(
                Arc::clone(&store),
                Arc::clone(&config.clock),
                config.horizon_ms,
            ),
        };
        let syncer = Syncer::start(Arc::clone(&cell), Arc::clone(&store), setup);
        let inner = Arc::new(Inner {
            cell,
            store,
            syncer,
            clock: config.clock,
            horizon_ms: config.horizon_ms,
            driver_wake: Notify::new(),
            driver_held: AtomicBool::new(false),
            stop: watch::channel(false).0,
            disk: DiskGuard::new(&config.data_dir, config.disk_reserve),
        });
        let tasks = vec![
            ("driver", tokio::spawn(driver::run(Arc::clone(&inner)))),
            (
                "sweeper",
                tokio::spawn(crate::retain::sweep(Arc::clone(&inner))),
            ),
        ];
        report.open_duration = started.elapsed();
        Ok(LocalBroker {
            inner,
            report,
            tasks: Mutex::new(tasks),
        })
    }

    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    pub fn store_stats(&self) -> StoreStats {
        let waiting_leases = self.inner.lock_state(Site::Inspect).waiters.len() as u64;
        StoreStats {
            commits: self.inner.syncer.commits(),
            fsyncs: self.inner.syncer.fsyncs(),
            lock_acquisitions: self.inner.cell.acquisitions(),
            waiting_leases,
        }
    }

    /// How many planned faults have fired so far: the fault-injection
    /// tests wait for their fault with it rather than for a moment.
    #[cfg(any(test, feature = "fault-injection"))]
    pub fn faults_injected(&self) -> u64 {
        self.inner.store.faults().injected()
    }

    /// Messages held in memory now (the horizon's, leased and dead ones);
    /// far-future messages are on disk only and not counted.
    /// A test hook: while `held`, the driver does no rounds, so no timer
    /// fires in the background and no waiting lease call is woken by
    /// time. Calls still settle time themselves (a call applies what is
    /// due at its `now` before it acts), which is what the conformance
    /// cases of `conformance_tests_time_at_call!` check.
    #[doc(hidden)]
    pub fn hold_driver(&self, held: bool) {
        self.inner.driver_held.store(held, Ordering::Relaxed);
        self.inner.driver_wake.notify_one();
    }

    pub fn messages_in_memory(&self) -> usize {
        let state = self.inner.lock_state(Site::Inspect);
        state.queues.values().map(|q| q.messages.len()).sum()
    }

    pub(crate) async fn stop_background(&self) {
        self.inner.stop.send_replace(true);
        let tasks = std::mem::take(&mut *lock(&self.tasks));
        for (name, task) in tasks {
            if task.await.is_err() {
                tracing::error!(task = name, "delayd background task panicked");
            }
        }
        let inner = Arc::clone(&self.inner);
        if tokio::task::spawn_blocking(move || inner.syncer.stop())
            .await
            .is_err()
        {
            tracing::error!("delayd sync thread could not be stopped");
        }
    }
}

impl Drop for LocalBroker {
    fn drop(&mut self) {
        // The background tasks hold the inner state; telling them to stop
        // lets the store close (and its lock file go) once they have seen
        // it.
        self.inner.stop.send_replace(true);
    }
}

use delayd_core::poison::lock;

impl Inner {
    pub fn lock_state(&self, site: Site) -> StateGuard<'_> {
        self.cell.lock(site)
    }

    /// A failed engine write seen outside the sync thread: writes are
    /// refused until the sync thread has reopened the engine.
    pub fn poison(&self, reason: String) {
        self.syncer.fail(reason);
    }

    pub async fn stopped(&self) {
        let mut rx = self.stop.subscribe();
        let _ = rx.wait_for(|stopped| *stopped).await;
    }

    pub fn is_stopping(&self) -> bool {
        *self.stop.borrow()
    }

    pub fn check_writable(&self) -> BrokerResult<()> {
        if self.is_stopping() {
            return Err(BrokerError::unavailable("broker is shut down"));
        }
        if let Some(reason) = self.syncer.failure() {
            return Err(BrokerError::unavailable(format!(
                "store refuses writes: {reason}"
            )));
        }
        Ok(())
    }

    /// Ends a call's change under the state lock: serves the lease calls
    /// waiting on queues in which messages became ready (their leases join
    /// the same group), adds the writes to the open commit group, hands the
    /// waiting calls their deliveries, and wakes the sync thread and the
    /// driver if needed. Returns the ticket to wait on.
    pub fn absorb_locked(&self, state: &mut State, tx: Tx, now: u64) -> u64 {
        self.absorb_counted(state, tx, now).0
    }

    /// [`absorb_locked`](Self::absorb_locked), also returning how many
    /// messages were handed to waiting lease calls.
    pub fn absorb_counted(&self, state: &mut State, mut tx: Tx, now: u64) -> (u64, usize) {
        // Flow keys and queues the call changed: heads promoted, holds
        // timed, waiters noted, before the waiters are served.
        state.refresh_flow(now, &mut tx);
        let ready_queues = std::mem::take(&mut tx.ready_queues);
        let wake_driver = tx.wake_driver;
        let was_needed = state.groups.sync_needed();
        // The call's writes join the group first: a waiter served below
        // may be handed a message this very call enqueued, and reads its
        // payload from the group.
        let mut ticket = state.absorb(tx);
        let mut served = Vec::new();
        if !ready_queues.is_empty() {
            let mut serving = Tx::default();
            serving.ready_queues = ready_queues;
            served = state.serve_waiters(now, &mut serving);
            ticket = state.absorb(serving);
        }
        if state.groups.sync_needed() && !was_needed {
            self.cell.notify_sync();
        }
        let handed = served
            .iter()
            .map(|(_, deliveries, _)| deliveries.as_ref().map_or(0, Vec::len))
            .sum();
        for (sender, deliveries, undurable) in served {
            // A caller that left in the meantime loses nothing: its leases
            // run out and the messages come back (at-least-once).
            let ticket = undurable.then_some(ticket);
            let _ = sender.send(deliveries.map(|deliveries| Handed { deliveries, ticket }));
        }
        if wake_driver {
            self.driver_wake.notify_one();
        }
        (ticket, handed)
    }

    /// The skeleton of every changing call: lock, change, join the commit
    /// group, unlock, wait for durability.
    pub async fn write<T>(
        &self,
        change: impl FnOnce(&mut State, &Store, u64, &mut Tx) -> BrokerResult<T>,
    ) -> BrokerResult<T> {
        self.check_writable()?;
        let (out, ticket, backlog) = {
            let mut state = self.lock_state(Site::Call);
            let now = self.clock.now_ms();
            self.catch_up(&mut state, now)?;
            let mut tx = Tx::default();
            let out = change(&mut state, &self.store, now, &mut tx);
            let ticket = self.absorb_locked(&mut state, tx, now);
            (out, ticket, state.groups.backlog())
        };
        self.wait_for(ticket, backlog).await?;
        out
    }

    /// Waits as the durability mode promises; and, whatever the mode,
    /// until the group is written when the open group has grown past
    /// [`MAX_PENDING_OPS`]: without `Always`'s waits, producers faster than
    /// the engine would otherwise grow it (and memory) without bound.
    pub async fn wait_for(&self, ticket: u64, backlog: usize) -> BrokerResult<()> {
        if backlog > MAX_PENDING_OPS {
            self.syncer.wait_written(ticket).await;
        }
        self.syncer.wait(ticket).await
    }

    pub fn read<T>(
        &self,
        view: impl FnOnce(&State, &Store, u64) -> BrokerResult<T>,
    ) -> BrokerResult<T> {
        if self.is_stopping() {
            return Err(BrokerError::unavailable("broker is shut down"));
        }
        let mut state = self.lock_state(Site::Read);
        let now = self.clock.now_ms();
        self.catch_up(&mut state, now)?;
        view(&state, &self.store, now)
    }

    /// A read that scans an index of the engine: the open group's writes
    /// are written to the engine first, so the scan sees them.
    pub fn read_scan<T>(
        &self,
        view: impl FnOnce(&State, &Store, u64) -> BrokerResult<T>,
    ) -> BrokerResult<T> {
        if self.is_stopping() {
            return Err(BrokerError::unavailable("broker is shut down"));
        }
        let mut state = self.lock_state(Site::Read);
        let now = self.clock.now_ms();
        self.catch_up(&mut state, now)?;
        state.flush_pending(&self.store).map_err(|e| {
            self.poison(e.to_string());
            BrokerError::unavailable(format!("store refuses writes: {e}"))
        })?;
        view(&state, &self.store, now)
    }
}

/// A broker on a fresh directory reading `clock`, durability `never`, with
/// its store (for the tests that look at what is on disk) and the
/// directory (removed when dropped).
#[cfg(test)]
pub(crate) async fn open_for_test(
    clock: Arc<delayd_core::testkit::support::VirtualClock>,
) -> (Arc<dyn delayd_core::Broker>, Arc<Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let mut config = LocalConfig::new(dir.path());
    config.clock = clock;
    config.durability = crate::Durability::Never;
    let broker = LocalBroker::open(config).await.expect("open");
    let store = Arc::clone(&broker.inner.store);
    (Arc::new(broker), store, dir)
}
