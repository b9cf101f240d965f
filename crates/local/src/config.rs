//! Configuration of a [`crate::LocalBroker`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use delayd_core::{Clock, SystemClock};

/// How far a call's change is on its way to the disk when the call returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Every call returns only after its change is in the journal and the
    /// journal file is fsynced (group commit: concurrent calls share one
    /// fsync). A crash of the process, the OS or the machine loses nothing
    /// that was acknowledged, provided the disk honours fsync.
    #[default]
    Always,
    /// Calls return once their change is in the store's memory and journal
    /// buffer; a background task fsyncs the journal at this interval. A
    /// process crash can lose the changes of the last interval that were
    /// still in the journal buffer; an OS crash or power loss can lose up
    /// to one interval of acknowledged changes.
    Interval(Duration),
    /// Calls return once their change is in the store's memory and journal
    /// buffer; a background task hands the buffer to the OS promptly but
    /// never fsyncs (the engine still fsyncs when it seals a journal or
    /// flushes a table). A process crash can lose the last few milliseconds;
    /// an OS crash or power loss can lose everything since the engine's last
    /// own fsync.
    Never,
}

#[derive(Clone)]
pub struct LocalConfig {
    /// Directory of the store; created when missing.
    pub data_dir: PathBuf,
    pub durability: Durability,
    /// Messages due within this many milliseconds are kept in memory;
    /// later ones live only on disk until the horizon reaches them.
    pub horizon_ms: u64,
    /// The wall clock `deliver_at` is measured on.
    pub clock: Arc<dyn Clock>,
    /// Size of the engine's block cache, which serves payload reads at
    /// delivery.
    pub payload_cache_bytes: usize,
    /// Free space (bytes) the data directory's filesystem must keep: below
    /// it, enqueues are refused (`BrokerError::InsufficientStorage`) while
    /// acks, cancels and deletes go on and free space (docs/storage.md,
    /// "Disk full and failed writes"). 0 turns the check off.
    pub disk_reserve: u64,
    /// The nice value of the storage engine's background threads (memtable
    /// flushes and compactions); `None` leaves them at the process's.
    /// `delayd serve` sets 19: on a busy core they then run in the time the
    /// broker's threads leave, instead of preempting a thread that holds
    /// the state lock for a whole time slice (docs/storage.md, "The
    /// engine's background work").
    pub engine_nice: Option<i32>,
    /// Whether messages keep a history (api.md, "Message history"): one
    /// write per transition to the `events` keyspace (docs/storage.md,
    /// "Message history"). Off, `events` answers an empty history.
    pub history: bool,
    /// Engine operations to fail (tests of the failure paths).
    #[cfg(any(test, feature = "fault-injection"))]
    pub faults: crate::fault::FaultPlan,
}

impl LocalConfig {
    pub(crate) fn engine_options(&self) -> crate::store::EngineOptions {
        crate::store::EngineOptions {
            cache_bytes: self.payload_cache_bytes,
            nice: self.engine_nice,
        }
    }

    pub const DEFAULT_HORIZON_MS: u64 = 300_000;
    pub const DEFAULT_PAYLOAD_CACHE_BYTES: usize = 64 * 1024 * 1024;
    /// The engine's background threads' nice value `delayd serve` sets.
    pub const SERVE_ENGINE_NICE: i32 = 19;
    /// Room for a drain's acks and deletes, a memtable flush and a journal
    /// rotation after producers were stopped.
    pub const DEFAULT_DISK_RESERVE: u64 = 64 * 1024 * 1024;

    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            durability: Durability::Always,
            horizon_ms: Self::DEFAULT_HORIZON_MS,
            clock: Arc::new(SystemClock),
            payload_cache_bytes: Self::DEFAULT_PAYLOAD_CACHE_BYTES,
            disk_reserve: Self::DEFAULT_DISK_RESERVE,
            engine_nice: None,
            history: true,
            #[cfg(any(test, feature = "fault-injection"))]
            faults: crate::fault::FaultPlan::default(),
        }
    }
}

impl std::fmt::Debug for LocalConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalConfig")
            .field("data_dir", &self.data_dir)
            .field("durability", &self.durability)
            .field("horizon_ms", &self.horizon_ms)
            .field("payload_cache_bytes", &self.payload_cache_bytes)
            .field("engine_nice", &self.engine_nice)
            .field("history", &self.history)
            .field("disk_reserve", &self.disk_reserve)
            .finish_non_exhaustive()
    }
}
