//! Metric names shared by brokers and the server. Brokers record through the
//! `metrics` facade crate; with no recorder installed that costs nothing.

/// Histogram, seconds: how late a message became ready (fired_at - deliver_at).
/// Label `queue`.
pub const FIRE_LATENESS_SECONDS: &str = "delayd_fire_lateness_seconds";
/// Histogram, seconds: how late after its due time (`deliver_at`) a message
/// reached each step of its delivery. Label `stage`: `ready` (a timer or a
/// call made it ready), `leased` (a lease took it), `answered` (a frontend
/// wrote the answer carrying it: an HTTP lease response, a beanstalkd
/// `RESERVED`). Side by side, the three say where a late message lost its
/// time: the driver, the hand-off to a consumer, or the way out.
pub const DELIVERY_LATENESS_SECONDS: &str = "delayd_delivery_lateness_seconds";

/// A step of a delivery, for [`record_lateness`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Ready,
    Leased,
    Answered,
}

impl Stage {
    pub fn label(self) -> &'static str {
        match self {
            Stage::Ready => "ready",
            Stage::Leased => "leased",
            Stage::Answered => "answered",
        }
    }
}

/// Records that a message due at `deliver_at` reached `stage` at `now`
/// (both ms since the epoch). A message taken before it was due (a
/// beanstalkd `reserve-job` of a delayed job) is not late: not recorded.
/// For many messages at once, [`Lateness`] looks the histogram up once.
pub fn record_lateness(stage: Stage, now: u64, deliver_at: u64) {
    Lateness::of(stage).record(now, deliver_at);
}

/// One stage's lateness histogram, looked up once for a batch (a driver
/// round, a lease call's deliveries) instead of once per message.
pub struct Lateness(metrics::Histogram);

impl Lateness {
    pub fn of(stage: Stage) -> Self {
        Self(metrics::histogram!(DELIVERY_LATENESS_SECONDS, "stage" => stage.label()))
    }

    /// As [`record_lateness`].
    pub fn record(&self, now: u64, deliver_at: u64) {
        if deliver_at <= now {
            self.0.record((now - deliver_at) as f64 / 1000.0);
        }
    }
}

/// Histogram, seconds: how long a `LocalBroker` call held its state lock,
/// by label `site` (`call`, `read`, `lease`, `pipeline`, `driver`,
/// `commit`, `inspect`). Every other call waits meanwhile.
pub const STATE_LOCK_HOLD_SECONDS: &str = "delayd_state_lock_hold_seconds";
/// Histogram, seconds: how long a `LocalBroker` call waited for its state
/// lock, by label `site` (0 when it was free).
pub const STATE_LOCK_WAIT_SECONDS: &str = "delayd_state_lock_wait_seconds";

/// Histogram, seconds: one round of `LocalBroker`'s timer driver that did
/// something (fired timers or handed messages to waiting lease calls),
/// from taking the state lock to handing out, the wait for the lock
/// included.
pub const DRIVER_ROUND_SECONDS: &str = "delayd_driver_round_seconds";
/// Histogram: timers one driver round fired (messages made ready, leases
/// expired, schedules fired, flow holds ended).
pub const DRIVER_ROUND_FIRED: &str = "delayd_driver_round_fired";
/// Histogram: messages one driver round handed to waiting lease calls.
pub const DRIVER_ROUND_HANDED: &str = "delayd_driver_round_handed";
/// Histogram, seconds: the phases of one `LocalBroker` commit group, by
/// label `phase`: `open` (from the group's first write to its close),
/// `write` (the engine batch, outside the state lock), `fsync` (the
/// journal's, `always` only) and `publish` (waking the group's callers).
pub const COMMIT_PHASE_SECONDS: &str = "delayd_commit_phase_seconds";

/// Histogram: mutations per storage commit (group commit batch size).
pub const COMMIT_BATCH_SIZE: &str = "delayd_commit_batch_size";
/// Histogram, seconds: one storage commit including its fsync.
pub const COMMIT_SECONDS: &str = "delayd_commit_seconds";
/// Counter: storage commits.
pub const COMMITS_TOTAL: &str = "delayd_commits_total";
/// Counter: messages moved to dead. Label `queue`.
pub const DEAD_LETTERED_TOTAL: &str = "delayd_dead_lettered_total";
/// Counter: leases that expired. Label `queue`.
pub const LEASES_EXPIRED_TOTAL: &str = "delayd_leases_expired_total";
/// Gauge, bytes: free space of the embedded store's filesystem (what an
/// unprivileged writer may use), sampled at most every 100 ms.
pub const STORAGE_FREE_BYTES: &str = "delayd_storage_free_bytes";
/// Gauge, 0 or 1: 1 while the embedded store refuses enqueues because free
/// space is below its reserve (`--disk-reserve`).
pub const STORAGE_REFUSING: &str = "delayd_storage_refusing_writes";
/// Gauge, bytes: what the embedded store's block cache holds now (it fills
/// up to `--cache-size` as blocks are read, then stays there).
pub const STORAGE_CACHE_BYTES: &str = "delayd_storage_cache_bytes";
/// Gauge, bytes: the embedded store's block cache capacity (`--cache-size`).
pub const STORAGE_CACHE_CAPACITY_BYTES: &str = "delayd_storage_cache_capacity_bytes";
/// Counter: reopens of the embedded store's engine after a failed write.
pub const STORAGE_REOPENS_TOTAL: &str = "delayd_storage_reopens_total";
/// Counter: ready messages the flow gate held back when a delivery looked
/// at them. Labels `queue`, `reason` (`rate`, `concurrency`, `ordered`,
/// `cooldown`: [`crate::flow::Hold::reason`]).
pub const FLOW_HELD_TOTAL: &str = "delayd_flow_held_total";
/// Counter: deliveries deferred (push 429, 503 with `Retry-After`, nack
/// `defer`). Label `queue`.
pub const FLOW_DEFERRALS_TOTAL: &str = "delayd_flow_deferrals_total";
/// Gauge: flow keys whose state is kept ([`crate::QueueStats::flow_keys`]).
/// Label `queue`.
pub const FLOW_ACTIVE_KEYS: &str = "delayd_flow_active_keys";
/// Counter: schedule fire times enqueued. Label `queue`.
pub const SCHEDULE_FIRES_TOTAL: &str = "delayd_schedule_fires_total";
/// Counter: schedule fire times not enqueued because they were older than
/// the catch-up window (or not the newest, with `catchup: latest`). Label
/// `queue`.
pub const SCHEDULE_MISSED_TOTAL: &str = "delayd_schedule_missed_total";
/// Counter: schedule fire times not enqueued because of `overlap: skip`.
/// Label `queue`.
pub const SCHEDULE_SKIPPED_TOTAL: &str = "delayd_schedule_skipped_total";
/// Histogram, seconds: how late a schedule's fire was enqueued (enqueued at
/// minus fire time). Label `queue`.
pub const SCHEDULE_FIRE_LATENESS_SECONDS: &str = "delayd_schedule_fire_lateness_seconds";
