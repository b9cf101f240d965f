//! Message history's cost on the embedded store: the same workload with
//! `LocalConfig::history` on and off, alternately (on, off, off, on, ...
//! `DELAYD_BENCH_ROUNDS` times, default 2), each on a fresh store:
//! `DELAYD_BENCH_N` messages (default 200,000; 100-byte payloads, ids)
//! enqueued ready 100 per call, leased 100 at a time and acked with
//! `ack_many` (a message's life: three events). Per side: messages per
//! second, the bytes the process wrote (`write_bytes` of /proc/self/io,
//! journal and tables) per message, and the data directory's size after
//! the run. Durability `never`: the broker's own work; the fsyncs the
//! server's default adds are the same on both sides.

mod support;

use std::path::Path;
use std::time::Instant;

use delayd_core::{
    Broker, EnqueueOptions, EnqueueRequest, LeaseRequest, MessageId, QueueName, Schedule,
};
use delayd_local::{Durability, LocalBroker, LocalConfig};

fn written_bytes() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        match entry.metadata() {
            Ok(m) if m.is_dir() => total += dir_bytes(&path),
            Ok(m) => total += m.len(),
            Err(_) => {}
        }
    }
    total
}

struct Side {
    rate: f64,
    written: f64,
    dir: f64,
}

async fn run(history: bool, n: u64) -> Side {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = LocalConfig::new(dir.path());
    config.durability = Durability::Never;
    config.history = history;
    let broker = LocalBroker::open(config).await.expect("open");
    let q = QueueName::new("history").expect("queue");
    let written = written_bytes();
    let started = Instant::now();
    for start in (0..n).step_by(100) {
        let requests = (start..(start + 100).min(n))
            .map(|i| EnqueueRequest {
                id: Some(MessageId::new(format!("m-{i}")).expect("id")),
                schedule: Schedule::Now,
                payload: vec![1; 100],
                ..EnqueueRequest::default()
            })
            .collect();
        broker
            .enqueue(&q, requests, EnqueueOptions::default())
            .await
            .expect("enqueue");
        let request = LeaseRequest {
            max: 100,
            wait_ms: 0,
            lease_ms: None,
        };
        let leased = broker
            .lease(std::slice::from_ref(&q), request)
            .await
            .expect("lease");
        let acks = leased.into_iter().map(|d| (d.id, d.lease_id)).collect();
        for r in broker.ack_many(&q, acks).await.expect("ack_many") {
            r.expect("ack");
        }
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    broker.shutdown().await.expect("shutdown");
    drop(broker);
    Side {
        rate,
        written: written_bytes().saturating_sub(written) as f64 / n as f64,
        dir: dir_bytes(dir.path()) as f64 / n as f64,
    }
}

#[tokio::main]
async fn main() {
    let n = support::env_u64("DELAYD_BENCH_N", 200_000);
    let rounds = support::env_u64("DELAYD_BENCH_ROUNDS", 2);
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        for history in [true, false, false, true] {
            let side = run(history, n).await;
            println!(
                "history {}: {:.0} messages/s, {:.0} B written/message, {:.1} B on disk/message",
                if history { "on " } else { "off" },
                side.rate,
                side.written,
                side.dir
            );
            if history { &mut on } else { &mut off }.push(side);
        }
    }
    let mean = |v: &[Side], f: fn(&Side) -> f64| v.iter().map(f).sum::<f64>() / v.len() as f64;
    println!(
        "n={n}: on/off rate {:.3}x; written {:.0} vs {:.0} B/message (+{:.0}); on disk {:.1} vs {:.1} B/message",
        mean(&on, |s| s.rate) / mean(&off, |s| s.rate),
        mean(&on, |s| s.written),
        mean(&off, |s| s.written),
        mean(&on, |s| s.written) - mean(&off, |s| s.written),
        mean(&on, |s| s.dir),
        mean(&off, |s| s.dir),
    );
}
