//! Firing precision: N messages due within 10 s, consumed through
//! lease/ack by in-process consumers. Prints lateness (lease time minus
//! deliver_at) p50/p99/max and the number delivered early (must be 0).
//! N: env `DELAYD_BENCH_N` (default 20000); spread: `DELAYD_BENCH_SPREAD_MS`.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use delayd_core::{Broker, Clock, LeaseRequest, QueueName, Schedule, SystemClock};
use delayd_local::{LocalBroker, LocalConfig};
use hdrhistogram::Histogram;

#[tokio::main]
async fn main() {
    let n = support::env_u64("DELAYD_BENCH_N", 20_000);
    let spread = support::env_u64("DELAYD_BENCH_SPREAD_MS", 10_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Arc::new(
        LocalBroker::open(LocalConfig::new(dir.path()))
            .await
            .expect("open"),
    );
    let queue = QueueName::new("precision").expect("queue");
    let start = SystemClock.now_ms() + 2_000;
    support::enqueue_batched(&broker, &queue, n, |i| Schedule::At(start + i * spread / n)).await;
    let hist = Arc::new(Mutex::new(Histogram::<u64>::new(3).expect("histogram")));
    let (done, early) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let consumers: Vec<_> = (0..32)
        .map(|_| {
            let (broker, queue, hist, done, early) = (
                Arc::clone(&broker),
                queue.clone(),
                Arc::clone(&hist),
                Arc::clone(&done),
                Arc::clone(&early),
            );
            tokio::spawn(async move {
                while done.load(Ordering::Relaxed) < n {
                    let request = LeaseRequest {
                        max: 100,
                        wait_ms: 200,
                        lease_ms: None,
                    };
                    let got = broker
                        .lease(std::slice::from_ref(&queue), request)
                        .await
                        .expect("lease");
                    let now = SystemClock.now_ms();
                    for d in &got {
                        if now < d.deliver_at {
                            early.fetch_add(1, Ordering::Relaxed);
                        }
                        if let Ok(mut h) = hist.lock() {
                            let _ = h.record(now.saturating_sub(d.deliver_at));
                        }
                    }
                    // Ack the batch concurrently: the acks share fsyncs
                    // (group commit) instead of paying one each in turn.
                    let acks: Vec<_> = got
                        .into_iter()
                        .map(|d| {
                            let (broker, queue, done) =
                                (Arc::clone(&broker), queue.clone(), Arc::clone(&done));
                            tokio::spawn(async move {
                                broker.ack(&queue, &d.id, &d.lease_id).await.expect("ack");
                                done.fetch_add(1, Ordering::Relaxed);
                            })
                        })
                        .collect();
                    for ack in acks {
                        ack.await.expect("ack task");
                    }
                }
            })
        })
        .collect();
    for c in consumers {
        c.await.expect("consumer");
    }
    {
        let h = hist.lock().expect("histogram lock");
        println!(
            "n={n} spread={spread}ms lateness ms: p50={} p99={} max={} early={}",
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.max(),
            early.load(Ordering::Relaxed)
        );
    }
    broker.shutdown().await.expect("shutdown");
}
