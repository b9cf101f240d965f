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
//! A failed commit or fsync stops the writes: the page cache may have
//! dropped the dirty pages, so what is on disk is unknown, and the only
//! honest answer to the waiting callers and to every later write is
//! `Unavailable` (fjall's own poisoned flag and the "fsyncgate" lesson).
//! The thread then reopens the engine in process (`heal`): what is on
//! disk, replayed by fjall, becomes the truth again, memory is rebuilt
//! from it as at open, and writes resume (docs/storage.md, "Disk full and
//! failed writes").

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use delayd_core::{metric, BrokerError};
use fjall::PersistMode;

use crate::config::Durability;
use crate::error::OpenError;
use crate::fault::Faults;
use crate::lock::{Site, StateCell, StateGuard};
use crate::prezero::Prezero;
use crate::settle::Settled;
use crate::state::State;
use crate::store::{Store, WriteSet};

/// Rebuilds the engine and memory after a failed write (the open path, in
/// process), given the state with its lock held; replaces the state.
pub(crate) type Reopen = Box<dyn Fn(&mut State) -> Result<(), OpenError> + Send + Sync>;

struct Shared {
    cell: Arc<StateCell>,
    store: Arc<Store>,
    stop: AtomicBool,
    /// A failure seen outside the sync thread (a scan's flush, the
    /// driver): the thread stops committing and reopens.
    heal_requested: AtomicBool,
    durable: Settled,
    groups: AtomicU64,
    fsyncs: AtomicU64,
    reopen: Reopen,
    faults: Arc<Faults>,
}

pub(crate) struct Syncer {
    shared: Arc<Shared>,
    durability: Durability,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// What the sync thread needs besides the state and the engine.
pub(crate) struct SyncSetup {
    pub dir: PathBuf,
    pub durability: Durability,
    pub reopen: Reopen,
}

impl Syncer {
    pub fn start(cell: Arc<StateCell>, store: Arc<Store>, setup: SyncSetup) -> Self {
        let durable = Settled::default();
        cell.lock(Site::Commit)
            .groups
            .follow_durable(durable.upto_handle());
        let shared = Arc::new(Shared {
            cell,
            faults: Arc::clone(store.faults()),
            store,
            stop: AtomicBool::new(false),
            heal_requested: AtomicBool::new(false),
            durable,
            groups: AtomicU64::new(0),
            fsyncs: AtomicU64::new(0),
            reopen: setup.reopen,
        });
        let thread_shared = Arc::clone(&shared);
        let (dir, durability) = (setup.dir, setup.durability);
        let thread = std::thread::Builder::new()
            .name("delayd-sync".into())
            .spawn(move || sync_loop(&thread_shared, &dir, durability))
            .ok();
        if thread.is_none() {
            shared.durable.update(|d| {
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
        self.shared.durable.failed()
    }

    /// Reports a failed engine write seen outside the sync thread: writes
    /// are refused from now on, and the sync thread reopens the engine.
    pub fn fail(&self, reason: String) {
        tracing::error!(error = %reason, "store write failed; refusing writes until the engine is reopened");
        self.shared.durable.update(|d| {
            d.failed.get_or_insert(reason);
        });
        self.shared.heal_requested.store(true, Ordering::SeqCst);
        self.shared.cell.notify_all();
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
        self.shared.durable.wait(ticket).await
    }

    /// Returns once group `ticket` has been written to the engine and
    /// handed to the OS (fsynced with `Always`), in every durability mode:
    /// the backpressure of `Interval` and `Never` callers when the open
    /// group grows large (see `MAX_PENDING_OPS`).
    pub async fn wait_written(&self, ticket: u64) {
        let _ = self.shared.durable.wait(ticket).await;
    }

    /// Makes everything absorbed durable and stops the thread.
    pub fn stop(&self) {
        {
            let _state = self.shared.cell.lock(Site::Commit);
            self.shared.stop.store(true, Ordering::SeqCst);
            self.shared.cell.notify_all();
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

pub(crate) fn unavailable(reason: String) -> BrokerError {
    BrokerError::Unavailable {
        reason: format!("commit not durable: {reason}"),
        maybe_applied: true,
    }
}

// A panic while holding these locks leaves a thread handle behind, which
// stays meaningful, so poisoning is ignored.
use delayd_core::poison::lock;

/// Commits groups until stopped; after a failure, reopens the engine and
/// goes on.
fn sync_loop(shared: &Shared, dir: &Path, durability: Durability) {
    loop {
        let mut journal = JournalSync::new(dir);
        let Err(reason) = run_groups(shared, &mut journal, durability) else {
            return;
        };
        fail(shared, &reason);
        if !heal(shared) {
            return;
        }
    }
}

/// Closes, writes and fsyncs groups until stopped (`Ok`) or a write or
/// fsync fails (`Err`, the reason).
fn run_groups(
    shared: &Shared,
    journal: &mut JournalSync,
    durability: Durability,
) -> Result<(), String> {
    loop {
        let state = wait_for_group(shared, durability);
        let stop = shared.stop.load(Ordering::SeqCst);
        if shared.heal_requested.load(Ordering::SeqCst) {
            return Err(shared.durable.failed().unwrap_or_default());
        }
        if !state.groups.sync_needed() {
            if stop {
                // Nothing open; still make the engine's own buffers
                // durable on the way out.
                drop(state);
                if let Err(e) = persist(shared, journal, PersistMode::SyncAll, 0) {
                    tracing::error!(error = %e, "final fsync at shutdown failed");
                }
                return Ok(());
            }
            continue;
        }
        let (group, set) = write_group(shared, state)?;
        shared.groups.fetch_add(1, Ordering::Relaxed);
        let mode = match durability {
            _ if stop => PersistMode::SyncAll,
            Durability::Never => PersistMode::Buffer,
            _ => PersistMode::SyncAll,
        };
        let fsync_started = Instant::now();
        persist(shared, journal, mode, set.len())?;
        if mode == PersistMode::SyncAll {
            phase("fsync", fsync_started);
        }
        // No state lock: `in_flight` counts as gone once `upto` reaches it
        // (`State::in_flight`); the next group taken replaces it.
        let publish_started = Instant::now();
        shared.durable.update(|d| d.upto = group);
        phase("publish", publish_started);
        // The group's memory is freed here or, while the state's
        // `in_flight` still shares it, after the next group is taken: never
        // under the state lock.
        drop(set);
        if stop {
            return Ok(());
        }
        if mode == PersistMode::SyncAll {
            // After the callers were answered: the next group waits for
            // the step instead.
            journal.prezero(&shared.store);
        }
    }
}

/// Closes the open group under the state lock and writes it to the engine
/// outside it: its number and its writes (in flight until durable).
fn write_group(shared: &Shared, mut state: StateGuard<'_>) -> Result<(u64, Arc<WriteSet>), String> {
    let closed = state.close_group().map_err(|e| e.to_string())?;
    if let Some(opened) = closed.opened_at {
        phase("open", opened);
    }
    let (group, set) = (closed.number, closed.writes);
    // The group is written outside the state lock (calls go on
    // meanwhile), holding the engine write lock, taken before the
    // state lock is released so that no scan's flush overtakes it.
    let writer = shared.store.lock_writer();
    drop(state);
    // The group before is freed here, after the lock is released.
    drop(closed.previous);
    shared.faults.commit().map_err(|e| e.to_string())?;
    let write_started = Instant::now();
    shared
        .store
        .commit_with(&set, &writer)
        .map_err(|e| e.to_string())?;
    drop(writer);
    phase("write", write_started);
    // The engine has it now: stop holding the group's memory.
    shared.cell.lock(Site::Commit).groups.written(&set);
    Ok((group, set))
}

/// Records how long a commit group's `phase` took, from `since`.
fn phase(phase: &'static str, since: Instant) {
    metrics::histogram!(metric::COMMIT_PHASE_SECONDS, "phase" => phase)
        .record(since.elapsed().as_secs_f64());
}

/// The sync thread's own failure (a write or fsync of a group); it heals
/// next. The first reason reported is kept, as in [`Syncer::fail`].
fn fail(shared: &Shared, reason: &str) {
    tracing::error!(error = %reason, "commit failed; the broker refuses writes until the engine is reopened");
    shared.durable.update(|d| {
        d.failed.get_or_insert_with(|| reason.to_string());
    });
}

/// First wait before reopening the engine after a failure, and the
/// longest (the wait doubles after each failed reopen).
const HEAL_FIRST: Duration = Duration::from_millis(200);
const HEAL_MAX: Duration = Duration::from_secs(30);

/// Reopens the engine after a failure, retrying until it works (`true`)
/// or the broker stops (`false`). Under the state lock (every call waits
/// meanwhile): the engine is closed and opened again, memory is rebuilt
/// from what is on disk, and the groups that were not durable when the
/// write failed are marked lost, so their callers (which were or will be
/// answered `Unavailable`) never see success.
fn heal(shared: &Shared) -> bool {
    let mut backoff = HEAL_FIRST;
    loop {
        if pause_unless_stopped(shared, backoff) {
            return false;
        }
        let mut state = shared.cell.lock(Site::Commit);
        let durable_upto = shared.durable.durable().upto;
        // Every ticket handed out so far is at most the open group's.
        let last_ticket = state.groups.open_number();
        match (shared.reopen)(&mut state) {
            Ok(()) => {
                // `last_ticket + 1` is the "nothing pending" ticket of the
                // fresh state: durable (it stands for what is on disk).
                state.groups.continue_after(last_ticket);
                // The fresh state's `in_flight` is empty; it reads the
                // published groups from the same place as before.
                state.groups.follow_durable(shared.durable.upto_handle());
                shared.heal_requested.store(false, Ordering::SeqCst);
                shared.durable.update(|d| {
                    if durable_upto < last_ticket {
                        d.lost.push((durable_upto + 1, last_ticket));
                    }
                    d.upto = last_ticket + 1;
                    d.failed = None;
                });
                metrics::counter!(metric::STORAGE_REOPENS_TOTAL).increment(1);
                tracing::warn!("storage engine reopened after a failed write; taking writes again");
                return true;
            }
            Err(e) => {
                tracing::error!(error = %e, retry_in = ?backoff, "reopening the storage engine failed");
                backoff = (backoff * 2).min(HEAL_MAX);
            }
        }
    }
}

/// Waits `pause` unless the broker stops first (`true`).
fn pause_unless_stopped(shared: &Shared, pause: Duration) -> bool {
    let deadline = Instant::now() + pause;
    let mut state = shared.cell.lock(Site::Commit);
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        state = shared.cell.wait_timeout(state, left);
    }
}

/// Waits until there is a group to close (or the thread must stop) and
/// returns with the state lock held. `Interval` closes a group every
/// interval; the other modes as soon as it has a write.
fn wait_for_group(shared: &Shared, durability: Durability) -> StateGuard<'_> {
    let cell = &shared.cell;
    let mut state = cell.lock(Site::Commit);
    match durability {
        Durability::Interval(every) => {
            let deadline = Instant::now() + every;
            while !shared.stop.load(Ordering::SeqCst)
                && !shared.heal_requested.load(Ordering::SeqCst)
            {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                state = cell.wait_timeout(state, left.min(Duration::from_secs(1)));
            }
        }
        _ => {
            // Bounded: a heal request from outside the lock could slip
            // between the check and the wait.
            while !state.groups.sync_needed()
                && !shared.stop.load(Ordering::SeqCst)
                && !shared.heal_requested.load(Ordering::SeqCst)
            {
                state = cell.wait_timeout(state, Duration::from_secs(1));
            }
        }
    }
    state
}

/// fsyncs the active journal through our own file handle, and writes
/// zeros ahead of its writer (`prezero`).
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
    active: Option<ActiveJournal>,
}

struct ActiveJournal {
    /// fjall names journals `<id>.jnl` and rotates to `<id + 1>.jnl`.
    id: u64,
    file: File,
    /// `None` once pre-zeroing this file failed (it goes on unzeroed).
    prezero: Option<Prezero>,
}

impl JournalSync {
    fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            active: None,
        }
    }

    /// `fdatasync` of the active journal: its length does not change
    /// while fjall writes into its preallocation, and when it grows (a
    /// journal reopened in append mode) `fdatasync` writes the new size.
    fn sync(&mut self) -> std::io::Result<()> {
        if self.rotated()? {
            self.active = open_newest(&self.dir)?;
        }
        match &self.active {
            Some(active) => active.file.sync_data(),
            None => Ok(()),
        }
    }

    /// Whether the active journal may have changed: one `stat` of its
    /// successor's name rather than a directory listing per fsync.
    fn rotated(&self) -> std::io::Result<bool> {
        match &self.active {
            None => Ok(true),
            Some(active) => {
                let next = self
                    .dir
                    .join(format!("{}.jnl", active.id.saturating_add(1)));
                next.try_exists()
            }
        }
    }

    /// One pre-zeroing step when the writer came near the zeroed run's
    /// end: under the engine write lock, after the journal buffer went to
    /// the OS (see `prezero`), then fsynced without the lock. A failure
    /// only stops pre-zeroing this file: the zeros are an optimization,
    /// never a byte of the journal.
    fn prezero(&mut self, store: &Store) {
        let Some(active) = &mut self.active else {
            return;
        };
        let Some(prezero) = active.prezero.as_mut() else {
            return;
        };
        if !prezero.after_group() {
            return;
        }
        let stepped = {
            let _writer = store.lock_writer();
            store
                .persist(PersistMode::Buffer)
                .map_err(std::io::Error::other)
                .and_then(|()| prezero.step())
        };
        if let Err(e) = stepped.and_then(|wrote| if wrote { prezero.sync() } else { Ok(()) }) {
            tracing::warn!(error = %e, "writing zeros ahead of the journal failed; this journal goes on without");
            active.prezero = None;
        }
    }
}

/// The newest journal, opened for fsyncs and pre-zeroing.
fn open_newest(dir: &Path) -> std::io::Result<Option<ActiveJournal>> {
    let Some((id, path)) = crate::check::newest_journal(dir)? else {
        return Ok(None);
    };
    // Written only by `Prezero`, at offsets fjall has not reached; never
    // in append mode (that would move nothing, but say the wrong thing).
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)?;
    let prezero = match file.try_clone().and_then(Prezero::new) {
        Ok(prezero) => Some(prezero),
        Err(e) => {
            tracing::warn!(error = %e, journal = %path.display(), "cannot pre-zero the journal");
            None
        }
    };
    Ok(Some(ActiveJournal { id, file, prezero }))
}

fn persist(
    shared: &Shared,
    journal: &mut JournalSync,
    mode: PersistMode,
    ops: usize,
) -> Result<(), String> {
    let started = Instant::now();
    let store = &shared.store;
    let result = match mode {
        PersistMode::SyncAll => store
            .persist(PersistMode::Buffer)
            .map_err(|e| e.to_string())
            .and_then(|()| shared.faults.fsync().map_err(|e| e.to_string()))
            .and_then(|()| journal.sync().map_err(|e| e.to_string())),
        other => store.persist(other).map_err(|e| e.to_string()),
    };
    // The caller logs the failure (`fail`) and reopens the engine.
    result?;
    if mode == PersistMode::SyncAll {
        shared.fsyncs.fetch_add(1, Ordering::Relaxed);
    }
    metrics::histogram!(metric::COMMIT_SECONDS).record(started.elapsed().as_secs_f64());
    metrics::histogram!(metric::COMMIT_BATCH_SIZE).record(ops as f64);
    metrics::counter!(metric::COMMITS_TOTAL).increment(1);
    Ok(())
}
