//! [`LocalBroker`]: opening and recovery, the call skeleton (lock, change,
//! commit, wait for durability), and shutdown.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use delayd_core::{BrokerError, BrokerResult, Clock};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::codec::FORMAT_VERSION;
use crate::config::LocalConfig;
use crate::consume::Failure;
use crate::driver;
use crate::error::{OpenError, StoreError};
use crate::state::{State, Tx};
use crate::store::Store;
use crate::sync::Syncer;

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
    pub open_duration: Duration,
}

impl RecoveryReport {
    pub fn torn_tail_detected(&self) -> bool {
        self.torn_tail_bytes > 0
    }
}

/// Commit and fsync counters (benchmarks: messages per fsync).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub commits: u64,
    pub fsyncs: u64,
}

pub(crate) struct Inner {
    state: Mutex<State>,
    pub store: Store,
    pub syncer: Syncer,
    pub clock: Arc<dyn Clock>,
    pub horizon_ms: u64,
    /// Bumped whenever a message becomes ready (or on shutdown): lease
    /// calls wait on it.
    pub ready: watch::Sender<u64>,
    pub driver_wake: Notify,
    stop: watch::Sender<bool>,
    poison: OnceLock<String>,
}

/// The durable, embedded broker. See the crate docs and docs/storage.md.
pub struct LocalBroker {
    pub(crate) inner: Arc<Inner>,
    report: RecoveryReport,
    driver: Mutex<Option<JoinHandle<()>>>,
}

impl LocalBroker {
    /// Opens (or creates) the store in `config.data_dir` and recovers the
    /// last durable state. Must be called inside a tokio runtime.
    pub async fn open(config: LocalConfig) -> Result<LocalBroker, OpenError> {
        let started = Instant::now();
        let path = config.data_dir.clone();
        let fail = |source: StoreError| OpenError::Store {
            path: path.clone(),
            source,
        };
        let opened = Store::open(&config.data_dir, config.payload_cache_bytes).map_err(fail)?;
        let store = opened.store;
        match store.format_version().map_err(fail)? {
            None => store.init_format().map_err(fail)?,
            Some(FORMAT_VERSION) => {}
            Some(found) => {
                return Err(OpenError::FormatVersion {
                    path,
                    found,
                    expected: FORMAT_VERSION,
                })
            }
        }
        let mut state = State::new(store.seq_high_water().map_err(fail)? + 1);
        let now = config.clock.now_ms();
        let mut report = recover(&mut state, &store, now, config.horizon_ms).map_err(fail)?;
        report.torn_tail_bytes = opened.torn_tail_bytes;
        if report.torn_tail_detected() {
            tracing::warn!(
                bytes = report.torn_tail_bytes,
                "journal tail was damaged; cut off"
            );
        }
        let syncer = Syncer::start(store.db.clone(), config.data_dir.clone(), config.durability);
        let inner = Arc::new(Inner {
            state: Mutex::new(state),
            store,
            syncer,
            clock: config.clock,
            horizon_ms: config.horizon_ms,
            ready: watch::channel(0).0,
            driver_wake: Notify::new(),
            stop: watch::channel(false).0,
            poison: OnceLock::new(),
        });
        // Recovery changed records (expired leases): durable before serving.
        inner
            .store
            .db
            .persist(fjall::PersistMode::SyncAll)
            .map_err(|e| fail(e.into()))?;
        let driver = tokio::spawn(driver::run(Arc::clone(&inner)));
        report.open_duration = started.elapsed();
        Ok(LocalBroker {
            inner,
            report,
            driver: Mutex::new(Some(driver)),
        })
    }

    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    pub fn store_stats(&self) -> StoreStats {
        StoreStats {
            commits: self.inner.syncer.commits(),
            fsyncs: self.inner.syncer.fsyncs(),
        }
    }

    /// Messages held in memory now (the horizon's, leased and dead ones);
    /// far-future messages are on disk only and not counted.
    pub fn messages_in_memory(&self) -> usize {
        let state = self.inner.lock_state();
        state.queues.values().map(|q| q.messages.len()).sum()
    }

    pub(crate) async fn stop_background(&self) {
        self.inner.stop.send_replace(true);
        self.inner.ready.send_modify(|n| *n += 1);
        let driver = lock(&self.driver).take();
        if let Some(driver) = driver {
            if driver.await.is_err() {
                tracing::error!("delayd driver task panicked");
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
        // The driver holds the inner state; telling it to stop lets the
        // store close (and its lock file go) once the task has seen it.
        self.inner.stop.send_replace(true);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Rebuilds memory from the store: queues, the horizon's messages, dead
/// messages, and leases of the previous process (expired now).
fn recover(
    state: &mut State,
    store: &Store,
    now: u64,
    horizon_ms: u64,
) -> Result<RecoveryReport, StoreError> {
    let mut report = RecoveryReport::default();
    for (name, record) in store.all_queues()? {
        report.messages_on_disk +=
            record.counts.waiting + record.counts.leased + record.counts.dead;
        state
            .queues
            .insert(name, crate::state::QueueState::new(record));
    }
    let mut tx = Tx::default();
    // Horizon first: expired leases are placed relative to it.
    while driver::load_horizon_step(state, store, now, horizon_ms, &mut tx)? {}
    for key in store.pinned_keys()? {
        let (queue, _) = crate::codec::decode_message_key(&key)?;
        let Some(rec) = store.message(&key)? else {
            continue;
        };
        let leased = rec.state == delayd_core::MessageState::Leased;
        state.load(&queue, rec.clone(), now, &mut tx);
        if leased {
            report.leases_expired += 1;
            let failure = Failure {
                delay_ms: None,
                priority: None,
                may_die: true,
                timed_out: true,
            };
            state
                .fail(&queue, rec, failure, now, &mut tx)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        }
    }
    let (ws, _, _) = state.finish(tx)?;
    store.commit(ws)?;
    report.messages_in_memory = state.queues.values().map(|q| q.messages.len() as u64).sum();
    Ok(report)
}

impl Inner {
    pub fn lock_state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    pub fn poison(&self, reason: String) {
        let _ = self.poison.set(reason);
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
        if let Some(reason) = self.poison.get().cloned().or_else(|| self.syncer.failure()) {
            return Err(BrokerError::unavailable(format!(
                "store refuses writes: {reason}"
            )));
        }
        Ok(())
    }

    /// Commits the call's writes (under the state lock) and wakes whoever
    /// the call concerns. Returns the ticket to wait on.
    pub fn commit_locked(&self, state: &State, tx: Tx) -> Result<u64, StoreError> {
        let (ws, became_ready, wake_driver) = state.finish(tx)?;
        let ticket = if ws.is_empty() {
            // Nothing written, but what the call saw may be an earlier
            // call's write: wait for everything before to be durable.
            self.syncer.commits()
        } else {
            if let Some(reason) = self.poison.get() {
                return Err(StoreError::Poisoned(reason.clone()));
            }
            if let Err(e) = self.store.commit(ws) {
                self.poison(e.to_string());
                return Err(e);
            }
            self.syncer.note_commit()
        };
        if became_ready {
            self.ready.send_modify(|n| *n += 1);
        }
        if wake_driver {
            self.driver_wake.notify_one();
        }
        Ok(ticket)
    }

    /// The skeleton of every changing call: lock, change, commit, unlock,
    /// wait for durability.
    pub async fn write<T>(
        &self,
        change: impl FnOnce(&mut State, &Store, u64, &mut Tx) -> BrokerResult<T>,
    ) -> BrokerResult<T> {
        self.check_writable()?;
        let (out, ticket) = {
            let mut state = self.lock_state();
            let now = self.clock.now_ms();
            let mut tx = Tx::default();
            let out = change(&mut state, &self.store, now, &mut tx);
            let ticket = self
                .commit_locked(&state, tx)
                .map_err(|e| BrokerError::Unavailable {
                    reason: e.to_string(),
                    maybe_applied: false,
                })?;
            (out, ticket)
        };
        self.syncer.wait(ticket).await?;
        out
    }

    pub fn read<T>(
        &self,
        view: impl FnOnce(&State, &Store, u64) -> BrokerResult<T>,
    ) -> BrokerResult<T> {
        if self.is_stopping() {
            return Err(BrokerError::unavailable("broker is shut down"));
        }
        let state = self.lock_state();
        view(&state, &self.store, self.clock.now_ms())
    }
}
