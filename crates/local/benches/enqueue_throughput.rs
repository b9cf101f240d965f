//! Durable enqueue throughput with 1, 16 and 256 concurrent producers,
//! 100-byte payloads, one message per call. `Always` (group commit) is the
//! measurement; `Never` in the same run is the no-fsync baseline.
//! N messages per row: env `DELAYD_BENCH_N` (default 20000).

mod support;

use std::sync::Arc;
use std::time::Instant;

use delayd_core::{Broker, EnqueueOptions, EnqueueRequest, QueueName};
use delayd_local::{Durability, LocalBroker, LocalConfig};

async fn row(producers: usize, total: usize, durability: Durability) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = LocalConfig::new(dir.path());
    config.durability = durability;
    let broker = Arc::new(LocalBroker::open(config).await.expect("open"));
    let queue = QueueName::new("bench").expect("queue");
    let before = broker.store_stats();
    let started = Instant::now();
    let per = total / producers;
    let tasks: Vec<_> = (0..producers)
        .map(|_| {
            let (broker, queue) = (Arc::clone(&broker), queue.clone());
            tokio::spawn(async move {
                for _ in 0..per {
                    let request = EnqueueRequest {
                        payload: vec![b'p'; 100],
                        ..EnqueueRequest::default()
                    };
                    broker
                        .enqueue(&queue, vec![request], EnqueueOptions::default())
                        .await
                        .expect("enqueue");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("producer");
    }
    let secs = started.elapsed().as_secs_f64();
    let after = broker.store_stats();
    let messages = (per * producers) as f64;
    let fsyncs = (after.fsyncs - before.fsyncs) as f64;
    println!(
        "{:>9} {:>6} {:>12.0} {:>10.0} {:>10.1}",
        format!("{durability:?}").split('(').next().unwrap_or("?"),
        producers,
        messages / secs,
        fsyncs / secs,
        if fsyncs > 0.0 {
            messages / fsyncs
        } else {
            f64::NAN
        },
    );
    broker.shutdown().await.expect("shutdown");
}

#[tokio::main]
async fn main() {
    let total = support::env_u64("DELAYD_BENCH_N", 20_000) as usize;
    println!(
        "{:>9} {:>6} {:>12} {:>10} {:>10}",
        "mode", "prod", "msgs/s", "fsyncs/s", "msgs/fsync"
    );
    for producers in [1, 16, 256] {
        let n = if producers == 1 { total / 10 } else { total };
        row(producers, n, Durability::Always).await;
    }
    row(256, total, Durability::Never).await;
}
