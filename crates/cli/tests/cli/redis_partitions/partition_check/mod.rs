//! The checker of `redis_partitions.rs`: the clients' records against the
//! promises, as Jepsen's checkers work (from the history alone, no peeking
//! into the store). Returns every violation, so a failure shows them all.
//! Beside it, [`checker`] runs the one history checker (`delayd_history`)
//! on the same run's recorded calls.

use delayd_history::{self as history, Op};

use super::{Record, QUEUE, SCHEDULE};

/// The schedule's definition as the `PUT` answered it, when the history
/// checker checks its fire times (an `every_ms` schedule with `overlap:
/// allow`; otherwise it checks only that none fires twice).
pub fn every(answer: &serde_json::Value) -> Option<history::Every> {
    if answer["overlap"] != "allow" {
        return None;
    }
    Some(history::Every {
        every_ms: answer["every_ms"].as_u64()?,
        start_at: answer["start_at"].as_u64()?,
        end_at: answer["end_at"].as_u64(),
        catchup_all: answer["catchup"] == "all",
        catchup_window_ms: answer["catchup_window_ms"].as_u64()?,
        paused: answer["paused"].as_bool()?,
    })
}

/// The history checker on the run's calls, stopped (not drained) at `end`:
/// every fire message up to 3 s before the end was leased by then (what
/// [`history`] asserts of the fire times too).
pub fn checker(mut ops: Vec<Op>, end: u64) -> history::Report {
    ops.push(Op::FiresObserved(history::FiresObserved {
        invoke: end,
        complete: end,
        queue: QUEUE.into(),
        schedule: SCHEDULE.into(),
        through: end.saturating_sub(3_000),
    }));
    ops.push(Op::Stop(history::Stop {
        at: super::now_ms(),
        drained: false,
    }));
    history::check(&history::History { ops })
}

/// When node A (index 0) was cut off from Redis.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub cut_at: u64,
    pub healed_at: u64,
}

/// Counts for the test's output: what the faults did to the clients.
pub fn summary(record: &Record, window: Window) -> String {
    let deliveries: Vec<&super::Delivery> = record.deliveries.values().flatten().collect();
    let failed_on_a = record
        .lease_failures
        .iter()
        .filter(|&&(node, at)| node == 0 && at >= window.cut_at && at < window.healed_at)
        .count();
    format!(
        "acknowledged enqueues {} (failed {}), ids delivered {}, deliveries {}, redeliveries {}, \
         acks not acknowledged {}, failed lease calls {} ({failed_on_a} on A while cut)",
        record.created.len(),
        record.enqueue_failures,
        record.deliveries.len(),
        deliveries.len(),
        deliveries.iter().filter(|d| d.attempt > 1).count(),
        deliveries.iter().filter(|d| !d.acked).count(),
        record.lease_failures.len(),
    )
}

pub fn all_delivered(record: &Record) -> bool {
    record
        .created
        .iter()
        .all(|id| record.deliveries.contains_key(id))
}

pub fn history(record: &Record, window: Window, first_fire: u64, end: u64) -> Vec<String> {
    let mut violations: Vec<String> = record
        .created
        .iter()
        .filter(|id| !record.deliveries.contains_key(*id))
        .map(|id| format!("{id}: enqueue acknowledged, never delivered"))
        .collect();
    for (id, deliveries) in &record.deliveries {
        violations.extend(at_least_once(id, deliveries));
    }
    violations.extend(cut_node(record, window));
    violations.extend(fires(record, first_fire, end));
    violations
}

/// One message's deliveries in the order they were received: each later
/// one must be a redelivery at least once allows.
fn at_least_once(id: &str, deliveries: &[super::Delivery]) -> Vec<String> {
    let mut sorted = deliveries.to_vec();
    sorted.sort_by_key(|d| (d.received_at, d.attempt));
    let mut violations = Vec::new();
    for pair in sorted.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        if after.attempt <= before.attempt {
            violations.push(format!(
                "{id}: attempt {} after attempt {} (enqueued or leased twice): {sorted:?}",
                after.attempt, before.attempt
            ));
        }
        if before.acked {
            violations.push(format!(
                "{id}: delivered after an acknowledged ack: {sorted:?}"
            ));
        }
        // Both times come from this machine's clock; a few ms of slack for
        // the node's and the test's reading of it.
        if after.received_at + 5 < before.lease_until {
            violations.push(format!(
                "{id}: redelivered before the previous lease expired: {sorted:?}"
            ));
        }
    }
    violations
}

/// Node A leased nothing while cut off, tried to, and leased again after.
fn cut_node(record: &Record, window: Window) -> Vec<String> {
    let mut violations = Vec::new();
    let during = |t: u64| t >= window.cut_at && t < window.healed_at;
    for (id, deliveries) in &record.deliveries {
        for d in deliveries {
            if d.node == 0 && during(d.requested_at) && d.received_at < window.healed_at {
                violations.push(format!("{id}: leased by node A while cut off: {d:?}"));
            }
        }
    }
    let refused = record
        .lease_failures
        .iter()
        .filter(|&&(node, at)| node == 0 && during(at))
        .count();
    if refused == 0 {
        violations.push("node A's lease calls did not fail while cut off".into());
    }
    let after = record
        .deliveries
        .values()
        .flatten()
        .any(|d| d.node == 0 && d.requested_at >= window.healed_at);
    if !after {
        violations.push("node A leased nothing after the link was healed".into());
    }
    violations
}

/// Every fire time due early enough was delivered; (enqueued twice is an
/// attempt that did not increase, above).
fn fires(record: &Record, first_fire: u64, end: u64) -> Vec<String> {
    let prefix = format!("{SCHEDULE}:");
    let delivered: std::collections::BTreeSet<u64> = record
        .deliveries
        .keys()
        .filter_map(|id| id.strip_prefix(&prefix)?.parse().ok())
        .collect();
    let mut violations: Vec<String> = (first_fire..end.saturating_sub(3_000))
        .step_by(1_000)
        .filter(|t| !delivered.contains(t))
        .map(|t| {
            format!(
                "fire time {t} (first_fire + {} ms) never delivered; delivered: {:?}",
                t - first_fire,
                delivered
                    .iter()
                    .map(|d| d.saturating_sub(first_fire))
                    .collect::<Vec<_>>()
            )
        })
        .collect();
    if delivered.is_empty() {
        violations.push("no schedule fire delivered".into());
    }
    violations
}
