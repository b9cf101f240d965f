//! The state lock: one mutex around [`State`], whose wait and hold times
//! are histograms per call site (`delayd_state_lock_wait_seconds` and
//! `delayd_state_lock_hold_seconds`, label `site`), so a late message can
//! be traced to the call that held the lock it waited for.
//!
//! Every acquisition names its [`Site`]; the guard records the hold when it
//! is dropped. An acquisition that finds the lock free records a wait of
//! zero without reading the clock. The histogram handles are looked up
//! once, when the cell is made (the server installs its recorder before it
//! opens the broker); with no recorder they cost nothing.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use delayd_core::metric;

use crate::state::State;

/// Where the state lock is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Site {
    /// A changing call (`Inner::write`): enqueue, ack, nack, cancel, ...
    Call,
    /// A reading call (`Inner::read`, `read_scan`).
    Read,
    /// A lease call's look (and leaving the line of waiters).
    Lease,
    /// A beanstalkd connection's pipelined commands (one call).
    Pipeline,
    /// The timer driver's round (timers fired, waiters served, horizon).
    Driver,
    /// The sync thread: closing a group, dropping the one written, healing.
    Commit,
    /// Counters and test hooks.
    Inspect,
}

impl Site {
    const ALL: [Site; 7] = [
        Site::Call,
        Site::Read,
        Site::Lease,
        Site::Pipeline,
        Site::Driver,
        Site::Commit,
        Site::Inspect,
    ];

    fn label(self) -> &'static str {
        match self {
            Site::Call => "call",
            Site::Read => "read",
            Site::Lease => "lease",
            Site::Pipeline => "pipeline",
            Site::Driver => "driver",
            Site::Commit => "commit",
            Site::Inspect => "inspect",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

struct Timing {
    wait: metrics::Histogram,
    hold: metrics::Histogram,
}

/// The state lock with its condition variable (the sync thread waits on
/// it for the open group's first write) and a count of acquisitions.
pub(crate) struct StateCell {
    state: Mutex<State>,
    sync_wake: Condvar,
    acquisitions: AtomicU64,
    timing: Vec<Timing>,
}

impl StateCell {
    pub fn new(state: State) -> Self {
        let timing = Site::ALL
            .iter()
            .map(|site| Timing {
                wait: metrics::histogram!(metric::STATE_LOCK_WAIT_SECONDS, "site" => site.label()),
                hold: metrics::histogram!(metric::STATE_LOCK_HOLD_SECONDS, "site" => site.label()),
            })
            .collect();
        Self {
            state: Mutex::new(state),
            sync_wake: Condvar::new(),
            acquisitions: AtomicU64::new(0),
            timing,
        }
    }

    pub fn lock(&self, site: Site) -> StateGuard<'_> {
        self.acquisitions.fetch_add(1, Ordering::Relaxed);
        let timing = &self.timing[site.index()];
        // A panic under the lock cannot leave a half-applied change
        // behind that later calls would trust more than a restart would:
        // memory is rebuilt from the store at open. Serving on is the
        // lesser evil than refusing every call.
        let guard = match self.state.try_lock() {
            Ok(guard) => {
                timing.wait.record(0.0);
                guard
            }
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {
                let asked = Instant::now();
                let guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
                timing.wait.record(asked.elapsed().as_secs_f64());
                guard
            }
        };
        StateGuard {
            guard: Some(guard),
            hold: &timing.hold,
            since: Instant::now(),
        }
    }

    pub fn acquisitions(&self) -> u64 {
        self.acquisitions.load(Ordering::Relaxed)
    }

    /// Called with the lock held after a call's writes joined the open
    /// group: wakes the sync thread if they were the group's first.
    pub fn notify_sync(&self) {
        self.sync_wake.notify_one();
    }

    /// Wakes every waiter of the condition variable (stop, heal).
    pub fn notify_all(&self) {
        self.sync_wake.notify_all();
    }

    /// Releases the lock until notified or `timeout` passes, then takes it
    /// again; the time asleep is not counted as held.
    pub fn wait_timeout<'a>(
        &'a self,
        mut guard: StateGuard<'a>,
        timeout: Duration,
    ) -> StateGuard<'a> {
        guard.record_hold();
        if let Some(inner) = guard.guard.take() {
            let inner = self
                .sync_wake
                .wait_timeout(inner, timeout)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
            guard.guard = Some(inner);
        }
        guard.since = Instant::now();
        guard
    }
}

/// The state, locked; records how long it was held when dropped.
pub(crate) struct StateGuard<'a> {
    /// `None` only inside [`StateCell::wait_timeout`].
    guard: Option<MutexGuard<'a, State>>,
    hold: &'a metrics::Histogram,
    since: Instant,
}

impl StateGuard<'_> {
    fn record_hold(&self) {
        self.hold.record(self.since.elapsed().as_secs_f64());
    }
}

impl Deref for StateGuard<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        match &self.guard {
            Some(guard) => guard,
            None => unreachable!("state guard read while waiting"),
        }
    }
}

impl DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut State {
        match &mut self.guard {
            Some(guard) => guard,
            None => unreachable!("state guard written while waiting"),
        }
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        if self.guard.is_some() {
            self.record_hold();
        }
    }
}
