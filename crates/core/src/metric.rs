//! Metric names shared by brokers and the server. Brokers record through the
//! `metrics` facade crate; with no recorder installed that costs nothing.

/// Histogram, seconds: how late a message became ready (fired_at - deliver_at).
/// Label `queue`.
pub const FIRE_LATENESS_SECONDS: &str = "delayd_fire_lateness_seconds";
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
