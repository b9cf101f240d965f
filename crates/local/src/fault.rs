//! Fault injection, the storage seam of the tests (compiled with the
//! `fault-injection` feature and in the crate's own tests): makes the n-th
//! group write to the engine, the n-th journal fsync or the n-th read of
//! the engine fail as an I/O error, at the points where a full or failing
//! disk makes them fail. The engine itself cannot be wrapped (fjall opens
//! its own files), so the seam sits at the sync thread's two calls into it
//! and at the store's read functions; what follows a failure (refusal, the
//! callers' answers, the reopen) is the real path.

#[cfg(any(test, feature = "fault-injection"))]
mod plan {
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Which engine operations fail. Counts are 1-based and run from the
    /// broker's open; each planned fault fires once.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct FaultPlan {
        /// The n-th commit group written to the engine fails before it is
        /// written (nothing of it reaches the journal).
        pub fail_commit: Option<u64>,
        /// The n-th journal fsync fails after the group was handed to the
        /// OS (it may or may not be on disk, as after a real failed fsync).
        pub fail_fsync: Option<u64>,
        /// The n-th read of the engine after open (a get, or a scan as a
        /// whole) fails before it reads, as a read of a failing disk does.
        pub fail_read: Option<u64>,
    }

    #[derive(Default)]
    pub(crate) struct Faults {
        plan: FaultPlan,
        commits: AtomicU64,
        fsyncs: AtomicU64,
        reads: AtomicU64,
        /// Planned faults that fired (the tests' hook to wait for one).
        injected: AtomicU64,
    }

    impl Faults {
        pub fn new(plan: FaultPlan) -> Self {
            Self {
                plan,
                ..Self::default()
            }
        }

        pub fn commit(&self) -> std::io::Result<()> {
            self.tick(&self.commits, self.plan.fail_commit, "commit")
        }

        pub fn fsync(&self) -> std::io::Result<()> {
            self.tick(&self.fsyncs, self.plan.fail_fsync, "fsync")
        }

        pub fn read(&self) -> std::io::Result<()> {
            self.tick(&self.reads, self.plan.fail_read, "read")
        }

        pub fn injected(&self) -> u64 {
            self.injected.load(Ordering::SeqCst)
        }

        fn tick(&self, count: &AtomicU64, fail_at: Option<u64>, what: &str) -> std::io::Result<()> {
            let n = count.fetch_add(1, Ordering::Relaxed) + 1;
            match fail_at == Some(n) {
                true => {
                    self.injected.fetch_add(1, Ordering::SeqCst);
                    Err(std::io::Error::other(format!(
                        "injected {what} failure #{n}"
                    )))
                }
                false => Ok(()),
            }
        }
    }
}

#[cfg(not(any(test, feature = "fault-injection")))]
mod plan {
    /// Without the `fault-injection` feature nothing is injected.
    #[derive(Default)]
    pub(crate) struct Faults;

    impl Faults {
        pub fn commit(&self) -> std::io::Result<()> {
            Ok(())
        }

        pub fn fsync(&self) -> std::io::Result<()> {
            Ok(())
        }

        pub fn read(&self) -> std::io::Result<()> {
            Ok(())
        }
    }
}

#[cfg(any(test, feature = "fault-injection"))]
pub use plan::FaultPlan;
pub(crate) use plan::Faults;

/// The faults `config` plans (none without the feature).
pub(crate) fn from_config(config: &crate::LocalConfig) -> Faults {
    #[cfg(any(test, feature = "fault-injection"))]
    return Faults::new(config.faults.clone());
    #[cfg(not(any(test, feature = "fault-injection")))]
    {
        let _ = config;
        Faults
    }
}
