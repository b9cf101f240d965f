//! Tubes as connections see them: which names map to which queues, and how
//! many connections use, watch and wait on each tube, with the per-tube
//! counters `stats-tube` reports.
//!
//! A tube "exists" (beanstalkd: is listed, has stats) while a connection
//! refers to it or its queue holds jobs. The queue itself is never deleted
//! when the tube disappears: it may carry configuration made over HTTP.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use delayd_core::QueueName;

/// The queue a tube name maps to: the same string. Every beanstalkd name is
/// a queue name except `.` and `..`, which core reserves: `None` for them
/// (`use` and `watch` answer `BAD_FORMAT`; see docs/beanstalk.md).
pub(crate) fn queue_name(tube: &str) -> Option<QueueName> {
    QueueName::new(tube).ok()
}

/// One tube's connection counts and counters since this process started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TubeEntry {
    pub using: u32,
    pub watching: u32,
    pub waiting: u32,
    pub total_jobs: u64,
    pub cmd_delete: u64,
    pub cmd_pause_tube: u64,
    /// The delay of the last `pause-tube`, in seconds (stats `pause`).
    pub pause_secs: u32,
}

impl TubeEntry {
    fn referenced(&self) -> bool {
        self.using > 0 || self.watching > 0 || self.waiting > 0
    }
}

/// Which counter of a tube to move.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ref {
    Using,
    Watching,
    Waiting,
}

#[derive(Debug, Default)]
pub(crate) struct Tubes {
    // A plain mutex: every critical section is a map lookup, never held
    // across an await.
    entries: Mutex<HashMap<QueueName, TubeEntry>>,
}

impl Tubes {
    fn lock(&self) -> MutexGuard<'_, HashMap<QueueName, TubeEntry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn add(&self, tube: &QueueName, which: Ref) {
        let mut entries = self.lock();
        let entry = entries.entry(tube.clone()).or_default();
        match which {
            Ref::Using => entry.using += 1,
            Ref::Watching => entry.watching += 1,
            Ref::Waiting => entry.waiting += 1,
        }
    }

    pub(crate) fn remove(&self, tube: &QueueName, which: Ref) {
        let mut entries = self.lock();
        if let Some(entry) = entries.get_mut(tube) {
            let count = match which {
                Ref::Using => &mut entry.using,
                Ref::Watching => &mut entry.watching,
                Ref::Waiting => &mut entry.waiting,
            };
            debug_assert!(*count > 0, "tube {tube}: {which:?} count underflow");
            *count = count.saturating_sub(1);
        }
    }

    /// Moves one of the per-tube counters.
    pub(crate) fn count(&self, tube: &QueueName, bump: impl FnOnce(&mut TubeEntry)) {
        bump(self.lock().entry(tube.clone()).or_default());
    }

    pub(crate) fn get(&self, tube: &QueueName) -> Option<TubeEntry> {
        self.lock().get(tube).copied()
    }

    /// Tubes some connection refers to.
    pub(crate) fn referenced(&self) -> Vec<QueueName> {
        self.lock()
            .iter()
            .filter(|(_, e)| e.referenced())
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Forgets tubes nobody refers to whose queue holds no jobs, so that
    /// clients inventing tube names cannot grow this map without bound.
    pub(crate) fn prune(&self, has_jobs: impl Fn(&QueueName) -> bool) {
        self.lock()
            .retain(|name, entry| entry.referenced() || has_jobs(name));
    }
}
