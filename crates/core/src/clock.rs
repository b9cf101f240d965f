//! Wall-clock time, injected so that tests can move it (and jump it).
//!
//! `deliver_at` values on the API are wall-clock epoch milliseconds. Brokers
//! time their own waiting on a monotonic clock and read this one only to
//! translate, so a wall-clock jump can neither fire everything at once nor
//! stall delivery (see each broker's docs for how).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The operating system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        // A clock before 1970 reads as 0 rather than panicking.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A wall clock that reads a fixed offset from the system clock; tests use
/// it to jump wall time forwards or backwards while real time passes.
#[derive(Clone, Debug, Default)]
pub struct SkewedClock {
    offset_ms: Arc<std::sync::atomic::AtomicI64>,
}

impl SkewedClock {
    pub fn new() -> Self {
        Self::default()
    }

    /// Jumps the clock by `delta_ms` (negative: backwards).
    pub fn jump(&self, delta_ms: i64) {
        self.offset_ms.fetch_add(delta_ms, Ordering::SeqCst);
    }
}

impl Clock for SkewedClock {
    fn now_ms(&self) -> u64 {
        let real = SystemClock.now_ms() as i64;
        (real + self.offset_ms.load(Ordering::SeqCst)).max(0) as u64
    }
}

/// A clock that only moves when told to; for deterministic tests of code
/// that reads wall time but does not wait on it.
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    now_ms: Arc<AtomicU64>,
}

impl ManualClock {
    pub fn new(start_ms: u64) -> Self {
        Self {
            now_ms: Arc::new(AtomicU64::new(start_ms)),
        }
    }

    pub fn set(&self, now_ms: u64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }

    pub fn advance(&self, delta_ms: u64) {
        self.now_ms.fetch_add(delta_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}
