//! Group commit: one thread makes commits durable, many callers wait.
//!
//! Callers commit their write set to the engine (cheap: journal buffer and
//! memtable) under the broker's state lock and take a ticket, the number of
//! commits so far. The sync thread reads the latest ticket `c`, fsyncs the
//! journal once, and publishes "durable up to `c`": every caller whose
//! ticket is `<= c` returns. Callers that arrive during an fsync form the
//! next group, so the number of fsyncs per second is bounded by the disk,
//! not by the callers.
//!
//! A failed fsync poisons the broker: the page cache may have dropped the
//! dirty pages, so what is on disk is unknown, and the only honest answer
//! to every later write is `Unavailable` (fjall's own poisoned flag and the
//! "fsyncgate" lesson).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use delayd_core::{metric, BrokerError};
use fjall::{Database, PersistMode};
use tokio::sync::watch;

use crate::config::Durability;

#[derive(Clone, Debug, Default)]
struct Durable {
    upto: u64,
    failed: Option<String>,
}

#[derive(Default)]
struct Pending {
    committed: u64,
    stop: bool,
}

struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
    durable: watch::Sender<Durable>,
    fsyncs: AtomicU64,
}

pub(crate) struct Syncer {
    shared: Arc<Shared>,
    durability: Durability,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Syncer {
    pub fn start(db: Database, dir: PathBuf, durability: Durability) -> Self {
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            durable: watch::channel(Durable::default()).0,
            fsyncs: AtomicU64::new(0),
        });
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("delayd-sync".into())
            .spawn(move || sync_loop(&thread_shared, &db, &dir, durability))
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

    /// Counts one commit that just reached the engine; returns its ticket.
    /// Called with the broker's state lock held, so tickets follow commit
    /// order.
    pub fn note_commit(&self) -> u64 {
        let mut pending = lock(&self.shared.pending);
        pending.committed += 1;
        self.shared.wake.notify_one();
        pending.committed
    }

    /// Why the store takes no more writes, if it does not.
    pub fn failure(&self) -> Option<String> {
        self.shared.durable.borrow().failed.clone()
    }

    pub fn fsyncs(&self) -> u64 {
        self.shared.fsyncs.load(Ordering::Relaxed)
    }

    pub fn commits(&self) -> u64 {
        lock(&self.shared.pending).committed
    }

    /// Returns once commit `ticket` is as durable as the durability mode
    /// promises (at once for `Interval` and `Never`).
    pub async fn wait(&self, ticket: u64) -> Result<(), BrokerError> {
        if self.durability != Durability::Always {
            return match self.failure() {
                Some(reason) => Err(unavailable(reason)),
                None => Ok(()),
            };
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

    /// Makes everything committed durable and stops the thread.
    pub fn stop(&self) {
        lock(&self.shared.pending).stop = true;
        self.shared.wake.notify_all();
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
    // A panic while holding this lock leaves plain counters behind, which
    // stay meaningful, so poisoning is ignored.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn sync_loop(shared: &Shared, db: &Database, dir: &Path, durability: Durability) {
    let mode = match durability {
        Durability::Never => PersistMode::Buffer,
        _ => PersistMode::SyncAll,
    };
    let mut journal = JournalSync::new(dir);
    loop {
        let (target, stop) = next_group(shared, durability);
        let done = shared.durable.borrow().upto;
        if target > done {
            let mode = if stop { PersistMode::SyncAll } else { mode };
            if let Err(reason) = persist(shared, db, &mut journal, mode, target - done) {
                shared.durable.send_modify(|d| d.failed = Some(reason));
                return;
            }
            shared.durable.send_modify(|d| d.upto = target);
        }
        if stop {
            return;
        }
    }
}

/// Waits for work: returns the latest ticket and whether to stop.
fn next_group(shared: &Shared, durability: Durability) -> (u64, bool) {
    let mut pending = lock(&shared.pending);
    match durability {
        Durability::Interval(every) => {
            let deadline = Instant::now() + every;
            while !pending.stop {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                pending = shared
                    .wake
                    .wait_timeout(pending, left.min(Duration::from_secs(1)))
                    .map(|(g, _)| g)
                    .unwrap_or_else(|e| e.into_inner().0);
            }
        }
        _ => {
            let done = shared.durable.borrow().upto;
            while pending.committed <= done && !pending.stop {
                pending = shared.wake.wait(pending).unwrap_or_else(|e| e.into_inner());
            }
        }
    }
    (pending.committed, pending.stop)
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
    db: &Database,
    journal: &mut JournalSync,
    mode: PersistMode,
    group: u64,
) -> Result<(), String> {
    let started = Instant::now();
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
    shared.fsyncs.fetch_add(1, Ordering::Relaxed);
    metrics::histogram!(metric::COMMIT_SECONDS).record(started.elapsed().as_secs_f64());
    metrics::histogram!(metric::COMMIT_BATCH_SIZE).record(group as f64);
    metrics::counter!(metric::COMMITS_TOTAL).increment(1);
    Ok(())
}
