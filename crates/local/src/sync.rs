//! Group commit: calls join an open group, one thread commits and fsyncs
//! whole groups, many callers wait.
//!
//! A call changes memory under the state lock and adds its writes to the
//! open group (`State::absorb`), taking the group's number as its ticket.
//! The sync thread closes the open group under the same lock (so the
//! groups follow state-change order) and keeps it readable as the group in
//! flight, writes it to the engine as one batch outside the lock (holding
//! the engine write lock, so no scan's flush overtakes it), fsyncs the
//! journal once, and publishes "durable up to group `g`": every caller
//! whose ticket is `<= g` returns. Calls that
//! arrive during an fsync form the next group, so the number of engine
//! batches and fsyncs per second is bounded by the disk, not by the
//! callers, and a key many calls of a group touch (a queue's record, the
//! seq high-water mark) is written once per group.
//!
//! The thread sleeps on a condition variable of the state lock and is
//! notified only when the open group gets its first write, not per call.
//!
//! A failed commit or fsync poisons the broker: the page cache may have
//! dropped the dirty pages, so what is on disk is unknown, and the only
//! honest answer to every later write is `Unavailable` (fjall's own
//! poisoned flag and the "fsyncgate" lesson).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use delayd_core::{metric, BrokerError};
use fjall::PersistMode;
use tokio::sync::watch;

use crate::config::Durability;
use crate::state::State;
use crate::store::Store;

/// The state lock with its condition variable (the sync thread waits on
/// it for the open group's first write) and a count of acquisitions.
pub(crate) struct StateCell {
    state: Mutex<State>,
    sync_wake: Condvar,
    acquisitions: AtomicU64,
}

impl StateCell {
    pub fn new(state: State) -> Self {
        Self {
            state: Mutex::new(state),
            sync_wake: Condvar::new(),
            acquisitions: AtomicU64::new(0),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.acquisitions.fetch_add(1, Ordering::Relaxed);
        // A panic under the lock cannot leave a half-applied change
        // behind that later calls would trust more than a restart would:
        // memory is rebuilt from the store at open. Serving on is the
        // lesser evil than refusing every call.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn acquisitions(&self) -> u64 {
        self.acquisitions.load(Ordering::Relaxed)
    }

    /// Called with the lock held after a call's writes joined the open
    /// group: wakes the sync thread if they were the group's first.
    pub fn notify_sync(&self) {
        self.sync_wake.notify_one();
    }
}

#[derive(Clone, Debug, Default)]
struct Durable {
    upto: u64,
    failed: Option<String>,
}

struct Shared {
    cell: Arc<StateCell>,
    store: Arc<Store>,
    stop: AtomicBool,
    durable: watch::Sender<Durable>,
    groups: AtomicU64,
    fsyncs: AtomicU64,
}

pub(crate) struct Syncer {
    shared: Arc<Shared>,
    durability: Durability,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Syncer {
    pub fn start(
        cell: Arc<StateCell>,
        store: Arc<Store>,
        dir: PathBuf,
        durability: Durability,
    ) -> Self {
        let shared = Arc::new(Shared {
            cell,
            store,
            stop: AtomicBool::new(false),
            durable: watch::channel(Durable::default()).0,
            groups: AtomicU64::new(0),
            fsyncs: AtomicU64::new(0),
        });
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("delayd-sync".into())
            .spawn(move || sync_loop(&thread_shared, &dir, durability))
            .ok();
        if thread.is_none() {
            shared.durable.send_modify(|d| {
                d.failed = Some("cannot start the sync thread".into());
            });
        }
        Self {
            shared,
            durability,
            thread: Mutex::new(thread),
        }
    }

    /// Why the store takes no more writes, if it does not.
    pub fn failure(&self) -> Option<String> {
        self.shared.durable.borrow().failed.clone()
    }

    pub fn fsyncs(&self) -> u64 {
        self.shared.fsyncs.load(Ordering::Relaxed)
    }

    /// Groups written to the engine so far.
    pub fn commits(&self) -> u64 {
        self.shared.groups.load(Ordering::Relaxed)
    }

    /// Returns once group `ticket` is as durable as the durability mode
    /// promises (at once for `Interval` and `Never`).
    pub async fn wait(&self, ticket: u64) -> Result<(), BrokerError> {
        if self.durability != Durability::Always {
            return match self.failure() {
                Some(reason) => Err(unavailable(reason)),
                None => Ok(()),
            };
        }
        if self.shared.durable.borrow().upto >= ticket {
            return Ok(());
        }
        let mut rx = self.shared.durable.subscribe();
        let result = rx
            .wait_for(|d| d.upto >= ticket || d.failed.is_some())
            .await
            .map(|d| d.clone());
        match result {
            Ok(d) if d.upto >= ticket => Ok(()),
            Ok(d) => Err(unavailable(d.failed.unwrap_or_default())),
            Err(_) => Err(unavailable("sync thread stopped".to_string())),
        }
    }

    /// Returns once group `ticket` has been written to the engine and
    /// handed to the OS (fsynced with `Always`), in every durability mode:
    /// the backpressure of `Interval` and `Never` callers when the open
    /// group grows large (see `MAX_PENDING_OPS`).
    pub async fn wait_written(&self, ticket: u64) {
        if self.shared.durable.borrow().upto >= ticket {
            return;
        }
        let mut rx = self.shared.durable.subscribe();
        let _ = rx
            .wait_for(|d| d.upto >= ticket || d.failed.is_some())
            .await;
    }

    /// Makes everything absorbed durable and stops the thread.
    pub fn stop(&self) {
        {
            let _state = self.shared.cell.lock();
            self.shared.stop.store(true, Ordering::SeqCst);
            self.shared.cell.sync_wake.notify_all();
        }
        let thread = lock(&self.thread).take();
        if let Some(thread) = thread {
            if thread.join().is_err() {
                tracing::error!("delayd sync thread panicked");
            }
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn unavailable(reason: String) -> BrokerError {
    BrokerError::Unavailable {
        reason: format!("commit not durable: {reason}"),
        maybe_applied: true,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding this lock leaves a thread handle behind, which
    // stays meaningful, so poisoning is ignored.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn sync_loop(shared: &Shared, dir: &Path, durability: Durability) {
    let mut journal = JournalSync::new(dir);
    loop {
        let stop;
        let group = {
            let mut state = wait_for_group(shared, durability);
            stop = shared.stop.load(Ordering::SeqCst);
            if !state.sync_needed {
                if stop {
                    // Nothing open; still make the engine's own buffers
                    // durable on the way out.
                    drop(state);
                    let _ = persist(shared, &mut journal, PersistMode::SyncAll, 0);
                    return;
                }
                continue;
            }
            let (group, set) = match state.take_group() {
                Ok(taken) => taken,
                Err(e) => return fail(shared, &e.to_string()),
            };
            // The group is written outside the state lock (calls go on
            // meanwhile), holding the engine write lock, taken before the
            // state lock is released so that no scan's flush overtakes it.
            let set = Arc::new(set);
            state.committing = Some(Arc::clone(&set));
            let writer = shared.store.lock_writer();
            drop(state);
            if let Err(e) = shared.store.commit_with(&set, &writer) {
                return fail(shared, &e.to_string());
            }
            drop(writer);
            // The engine has it now: stop holding the group's memory.
            let mut state = shared.cell.lock();
            if state
                .committing
                .as_ref()
                .is_some_and(|committing| Arc::ptr_eq(committing, &set))
            {
                state.committing = None;
            }
            (group, set.len())
        };
        shared.groups.fetch_add(1, Ordering::Relaxed);
        let mode = match durability {
            _ if stop => PersistMode::SyncAll,
            Durability::Never => PersistMode::Buffer,
            _ => PersistMode::SyncAll,
        };
        if let Err(reason) = persist(shared, &mut journal, mode, group.1) {
            shared.durable.send_modify(|d| d.failed = Some(reason));
            return;
        }
        shared.durable.send_modify(|d| d.upto = group.0);
        if stop {
            return;
        }
    }
}

fn fail(shared: &Shared, reason: &str) {
    tracing::error!(error = %reason, "commit failed; the broker refuses further writes");
    shared
        .durable
        .send_modify(|d| d.failed = Some(reason.to_string()));
}

/// Waits until there is a group to close (or the thread must stop) and
/// returns with the state lock held. `Interval` closes a group every
/// interval; the other modes as soon as it has a write.
fn wait_for_group(shared: &Shared, durability: Durability) -> MutexGuard<'_, State> {
    let cell = &shared.cell;
    let mut state = cell.lock();
    match durability {
        Durability::Interval(every) => {
            let deadline = Instant::now() + every;
            while !shared.stop.load(Ordering::SeqCst) {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                state = cell
                    .sync_wake
                    .wait_timeout(state, left.min(Duration::from_secs(1)))
                    .map(|(g, _)| g)
                    .unwrap_or_else(|e| e.into_inner().0);
            }
        }
        _ => {
            while !state.sync_needed && !shared.stop.load(Ordering::SeqCst) {
                state = cell
                    .sync_wake
                    .wait(state)
                    .unwrap_or_else(|e| e.into_inner());
            }
        }
    }
    state
}

/// fsyncs the active journal through our own file handle.
///
/// fjall's `persist(SyncAll)` holds the journal writer lock during the
/// fsync, which would stall every commit (and so every caller) for the
/// whole fsync and shrink the groups to one or two commits. Instead the
/// journal buffer is handed to the OS under the lock (`Buffer`, fast) and
/// the file is fsynced here without it. Sound because fsync acts on the
/// file, not the descriptor, and because fjall fsyncs a journal when it
/// seals it: bytes flushed before a rotation are durable either way.
struct JournalSync {
    dir: PathBuf,
    active: Option<(PathBuf, File)>,
}

impl JournalSync {
    fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            active: None,
        }
    }

    fn sync(&mut self) -> std::io::Result<()> {
        let newest = newest_journal(&self.dir)?;
        let reuse = matches!(&self.active, Some((path, _)) if Some(path) == newest.as_ref());
        if !reuse {
            self.active = match newest {
                Some(path) => Some((path.clone(), File::open(&path)?)),
                None => None,
            };
        }
        match &self.active {
            // The journal is preallocated, so its size does not change:
            // fdatasync is enough.
            Some((_, file)) => file.sync_data(),
            None => Ok(()),
        }
    }
}

fn newest_journal(dir: &Path) -> std::io::Result<Option<PathBuf>> {
    let mut best: Option<(u64, PathBuf)> = None;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let Some(n) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".jnl"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        if best.as_ref().is_none_or(|(b, _)| n > *b) {
            best = Some((n, path));
        }
    }
    Ok(best.map(|(_, p)| p))
}

fn persist(
    shared: &Shared,
    journal: &mut JournalSync,
    mode: PersistMode,
    ops: usize,
) -> Result<(), String> {
    let started = Instant::now();
    let db = &shared.store.db;
    let result = match mode {
        PersistMode::SyncAll => db
            .persist(PersistMode::Buffer)
            .map_err(|e| e.to_string())
            .and_then(|()| journal.sync().map_err(|e| e.to_string())),
        other => db.persist(other).map_err(|e| e.to_string()),
    };
    if let Err(e) = result {
        tracing::error!(error = %e, "journal fsync failed; the broker refuses further writes");
        return Err(e);
    }
    if mode == PersistMode::SyncAll {
        shared.fsyncs.fetch_add(1, Ordering::Relaxed);
    }
    metrics::histogram!(metric::COMMIT_SECONDS).record(started.elapsed().as_secs_f64());
    metrics::histogram!(metric::COMMIT_BATCH_SIZE).record(ops as f64);
    metrics::counter!(metric::COMMITS_TOTAL).increment(1);
    Ok(())
}
