//! The disk-space reserve: calls that add data are refused while the data
//! directory's filesystem has less free space than the reserve, so that a
//! filling disk stops producers before the engine hits `ENOSPC` (which
//! would fail a commit and stop every write, consumers' acks included).
//! Calls that remove data keep working below the reserve: their small
//! records are what the reserve is for, and they free space.
//!
//! Free space is sampled (one `statvfs`) at most every [`SAMPLE_EVERY`],
//! by whichever call or driver round first finds the sample stale, not
//! once per call; between samples a call reads two atomics. The driver
//! samples every round, so the gauge stays fresh when idle and writes
//! resume within a round of space coming back.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use delayd_core::{metric, BrokerError};

/// Longest a free-space sample is trusted.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_millis(100);

pub(crate) struct DiskGuard {
    dir: PathBuf,
    reserve: u64,
    origin: Instant,
    /// Milliseconds since `origin` of the last sample, plus one (0: never).
    sampled_at: AtomicU64,
    free: AtomicU64,
    refusing: AtomicBool,
}

impl DiskGuard {
    pub fn new(dir: &Path, reserve: u64) -> Self {
        let guard = Self {
            dir: dir.to_path_buf(),
            reserve,
            origin: Instant::now(),
            sampled_at: AtomicU64::new(0),
            free: AtomicU64::new(u64::MAX),
            refusing: AtomicBool::new(false),
        };
        guard.sample();
        guard
    }

    /// Refuses a call that adds data when free space is below the reserve.
    pub fn check_add(&self) -> Result<(), BrokerError> {
        self.sample_if_stale();
        if !self.refusing.load(Ordering::Relaxed) {
            return Ok(());
        }
        Err(BrokerError::InsufficientStorage(format!(
            "the data directory {} has {} bytes free, below the reserve of {} bytes; \
             enqueues are refused until space is freed (acks, cancels and deletes still work)",
            self.dir.display(),
            self.free.load(Ordering::Relaxed),
            self.reserve
        )))
    }

    /// Samples unless a sample younger than [`SAMPLE_EVERY`] exists. Of
    /// concurrent callers that find it stale, one samples.
    pub fn sample_if_stale(&self) {
        let now = self.origin.elapsed().as_millis() as u64 + 1;
        let last = self.sampled_at.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < SAMPLE_EVERY.as_millis() as u64 {
            return;
        }
        if self
            .sampled_at
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.sample();
        }
    }

    /// One `statvfs` of the data directory; updates the flag and gauges.
    /// A failed `statvfs` keeps the previous verdict: it says nothing about
    /// space, and the engine reports real write failures itself.
    pub fn sample(&self) {
        let free = match rustix::fs::statvfs(&self.dir) {
            // Blocks available to unprivileged users, as a writer sees it.
            Ok(stat) => stat.f_bavail.saturating_mul(stat.f_frsize),
            Err(e) => {
                tracing::debug!(error = %e, dir = %self.dir.display(), "statvfs failed");
                return;
            }
        };
        let refusing = free < self.reserve;
        let was = self.refusing.swap(refusing, Ordering::Relaxed);
        self.free.store(free, Ordering::Relaxed);
        if refusing != was {
            match refusing {
                true => tracing::warn!(
                    free,
                    reserve = self.reserve,
                    "free disk space below the reserve; refusing enqueues"
                ),
                false => tracing::info!(
                    free,
                    reserve = self.reserve,
                    "free disk space above the reserve again; taking enqueues"
                ),
            }
        }
        metrics::gauge!(metric::STORAGE_FREE_BYTES).set(free as f64);
        metrics::gauge!(metric::STORAGE_REFUSING).set(if refusing { 1.0 } else { 0.0 });
    }
}
