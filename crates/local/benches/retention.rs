//! Retention: the memory a retained message costs, and what retention
//! costs an enqueue with an id.
//!
//! 1. Memory: `DELAYD_BENCH_N` messages (default 1,000,000) with ids,
//!    100-byte payloads, enqueued ready 1,000 per call, leased 1,000 at a
//!    time and acked with `ack_many`, on a queue whose `retain_ms` is
//!    `DELAYD_BENCH_RETAIN_MS` (default 3,600,000; run it with 0 too for
//!    the baseline): RSS growth per message (from /proc/self/statm) after
//!    the acks and once the engine settled (2 s).
//! 2. Enqueues with an id: rounds of `DELAYD_BENCH_ROUND` (default
//!    100,000) new ids, 100 per call, alternately to a queue with
//!    `retain_ms` 1 h (holding the acked messages of part 1 when it ran
//!    with retention) and to one without, in the order A B B A, repeated
//!    `DELAYD_BENCH_ROUNDS` times (default 2); enqueues per second of
//!    each and the ratio.
//!
//! Durability `never`: what is measured is the broker's own work (the
//! server's default `always` adds the same fsync wait to both sides).

mod support;

use std::time::Instant;

use delayd_core::{
    Broker, EnqueueOptions, EnqueueRequest, LeaseRequest, MessageId, QueueConfigPatch, QueueName,
    Schedule,
};
use delayd_local::{Durability, LocalBroker, LocalConfig};

use support::rss_bytes;

fn with_id(prefix: &str, i: u64) -> EnqueueRequest {
    EnqueueRequest {
        id: Some(MessageId::new(format!("{prefix}-{i}")).expect("id")),
        schedule: Schedule::Now,
        payload: vec![1; 100],
        ..EnqueueRequest::default()
    }
}

async fn queue(broker: &LocalBroker, name: &str, retain_ms: u64) -> QueueName {
    let q = QueueName::new(name).expect("queue");
    let patch = QueueConfigPatch {
        retain_ms: Some(retain_ms),
        ..QueueConfigPatch::default()
    };
    broker.put_queue(&q, patch).await.expect("put_queue");
    q
}

/// Enqueues, leases and acks `n` messages with ids `acked-<i>`.
async fn ack_all(broker: &LocalBroker, q: &QueueName, n: u64) {
    for start in (0..n).step_by(1_000) {
        let requests = (start..(start + 1_000).min(n))
            .map(|i| with_id("acked", i))
            .collect();
        broker
            .enqueue(q, requests, EnqueueOptions::default())
            .await
            .expect("enqueue");
        let request = LeaseRequest {
            max: 1_000,
            wait_ms: 0,
            lease_ms: None,
        };
        let leased = broker
            .lease(std::slice::from_ref(q), request)
            .await
            .expect("lease");
        let acks = leased.into_iter().map(|d| (d.id, d.lease_id)).collect();
        for r in broker.ack_many(q, acks).await.expect("ack_many") {
            r.expect("ack");
        }
    }
}

/// Enqueues `n` new ids (`<prefix>-<i>`) 100 per call; enqueues per second.
async fn enqueue_round(broker: &LocalBroker, q: &QueueName, prefix: &str, n: u64) -> f64 {
    let started = Instant::now();
    for start in (0..n).step_by(100) {
        let requests = (start..(start + 100).min(n))
            .map(|i| with_id(prefix, i))
            .collect();
        let results = broker
            .enqueue(q, requests, EnqueueOptions::default())
            .await
            .expect("enqueue");
        assert!(results.iter().all(|r| r.as_ref().is_ok_and(|o| o.created)));
    }
    n as f64 / started.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() {
    let n = support::env_u64("DELAYD_BENCH_N", 1_000_000);
    let retain_ms = support::env_u64("DELAYD_BENCH_RETAIN_MS", 3_600_000);
    let round = support::env_u64("DELAYD_BENCH_ROUND", 100_000);
    let rounds = support::env_u64("DELAYD_BENCH_ROUNDS", 2);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = LocalConfig::new(dir.path());
    config.durability = Durability::Never;
    let broker = LocalBroker::open(config).await.expect("open");
    let kept = queue(&broker, "kept", retain_ms).await;
    let rss_before = rss_bytes();
    ack_all(&broker, &kept, n).await;
    let after_acks = rss_bytes().saturating_sub(rss_before);
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let settled = rss_bytes().saturating_sub(rss_before);
    println!(
        "memory: n={n} retain_ms={retain_ms}: rss growth {after_acks} bytes = {:.1} B/message after the acks, {settled} bytes = {:.1} B/message settled",
        after_acks as f64 / n as f64,
        settled as f64 / n as f64,
    );
    let retaining = queue(&broker, "retaining", 3_600_000).await;
    let plain = queue(&broker, "plain", 0).await;
    // The retaining queue's lookups must go to disk: a retained message
    // in it makes `retained_until` lie in the future.
    ack_all(&broker, &retaining, 1).await;
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        for (k, side) in ["A", "B", "B", "A"].iter().enumerate() {
            let prefix = format!("r{r}-{k}");
            if *side == "A" {
                with.push(enqueue_round(&broker, &retaining, &prefix, round).await);
            } else {
                without.push(enqueue_round(&broker, &plain, &prefix, round).await);
            }
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!(
        "enqueue with id: retaining {:.0}/s {with:.0?}, plain {:.0}/s {without:.0?}: {:.2}x",
        mean(&with),
        mean(&without),
        mean(&with) / mean(&without)
    );
    broker.shutdown().await.expect("shutdown");
}
