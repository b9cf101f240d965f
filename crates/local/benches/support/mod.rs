//! What the local store's benchmarks share: their settings from the
//! environment and loading a store with messages.

#![allow(dead_code, reason = "each benchmark uses a different part")]

use delayd_core::{Broker, EnqueueOptions, EnqueueRequest, QueueName, Schedule};
use delayd_local::LocalBroker;

/// The environment variable `name` as a number, or `default` when unset or
/// not a number.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The process's resident memory (from /proc/self/statm), in bytes.
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Enqueues `n` messages of 100 bytes to `queue`, 1,000 per call, message
/// `i` with `schedule(i)`.
pub async fn enqueue_batched(
    broker: &LocalBroker,
    queue: &QueueName,
    n: u64,
    schedule: impl Fn(u64) -> Schedule,
) {
    for start in (0..n).step_by(1_000) {
        let requests = (start..(start + 1_000).min(n))
            .map(|i| EnqueueRequest {
                schedule: schedule(i),
                payload: vec![1; 100],
                ..EnqueueRequest::default()
            })
            .collect();
        broker
            .enqueue(queue, requests, EnqueueOptions::default())
            .await
            .expect("enqueue");
    }
}
