//! Memory and restart: N messages due spread over 30 days; RSS growth per
//! message (from /proc/self/statm) and time from open to first delivery
//! after a restart. N: env `DELAYD_BENCH_N` (default 200000).

mod support;

use std::time::Instant;

use delayd_core::{Broker, EnqueueOptions, EnqueueRequest, LeaseRequest, QueueName, Schedule};
use delayd_local::{Durability, LocalBroker, LocalConfig};

use support::rss_bytes;

#[tokio::main]
async fn main() {
    let n = support::env_u64("DELAYD_BENCH_N", 200_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let queue = QueueName::new("memory").expect("queue");
    let mut config = LocalConfig::new(dir.path());
    config.durability = Durability::Never;
    let broker = LocalBroker::open(config).await.expect("open");
    let rss_before = rss_bytes();
    let month_ms = 30 * 86_400_000u64;
    support::enqueue_batched(&broker, &queue, n, |i| {
        Schedule::Delay(600_000 + i * (month_ms / n))
    })
    .await;
    broker
        .enqueue(
            &queue,
            vec![EnqueueRequest::default()],
            EnqueueOptions::default(),
        )
        .await
        .expect("enqueue");
    let growth = rss_bytes().saturating_sub(rss_before);
    println!(
        "n={n} rss growth {growth} bytes = {:.1} bytes/message, in memory: {}",
        growth as f64 / n as f64,
        broker.messages_in_memory()
    );
    broker.shutdown().await.expect("shutdown");
    drop(broker);
    let started = Instant::now();
    let broker = LocalBroker::open(LocalConfig::new(dir.path()))
        .await
        .expect("reopen");
    let got = broker
        .lease(
            std::slice::from_ref(&queue),
            LeaseRequest {
                max: 1,
                wait_ms: 5_000,
                lease_ms: None,
            },
        )
        .await
        .expect("lease");
    println!(
        "restart to first delivery: {:?} (delivered {}), report {:?}",
        started.elapsed(),
        got.len(),
        broker.recovery_report()
    );
    broker.shutdown().await.expect("shutdown");
}
