//! What each "nothing acknowledged lost" setting costs, in one run on one
//! machine: enqueue calls of one message from 8 concurrent producers for
//! 3 s per setting, on fresh servers each time, every setting measured
//! twice in interleaved rounds (so a change of machine load hits all of
//! them alike). Reported: calls/s, p50/p99 latency, and the ratio of
//! calls/s to the first setting (no persistence, no replica).
//! Ratios, not absolute numbers, are the result: docs/redis.md,
//! "Replication and failover".
//! Run: `cargo bench -p delayd-redis --bench durability_cost`.

#[path = "../tests/redis/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use delayd_core::{Broker, EnqueueOptions, EnqueueRequest, QueueName};
use delayd_redis::{RedisBroker, ReplicaWait};
use support::{config, unique_prefix, RedisServer};

const PRODUCERS: usize = 8;
const LENGTH: Duration = Duration::from_secs(3);
const ROUNDS: usize = 2;

struct Setting {
    name: &'static str,
    primary: &'static [&'static str],
    replica: bool,
    wait: bool,
}

const AOF_ALWAYS: &[&str] = &["--appendonly", "yes", "--appendfsync", "always"];

const SETTINGS: &[Setting] = &[
    Setting {
        name: "no persistence, no replica",
        primary: &[],
        replica: false,
        wait: false,
    },
    Setting {
        name: "appendfsync everysec",
        primary: &["--appendonly", "yes", "--appendfsync", "everysec"],
        replica: false,
        wait: false,
    },
    Setting {
        name: "appendfsync always",
        primary: AOF_ALWAYS,
        replica: false,
        wait: false,
    },
    Setting {
        name: "replica, asynchronous",
        primary: &[],
        replica: true,
        wait: false,
    },
    Setting {
        name: "replica, min-replicas-to-write 1",
        primary: &[
            "--min-replicas-to-write",
            "1",
            "--min-replicas-max-lag",
            "10",
        ],
        replica: true,
        wait: false,
    },
    Setting {
        name: "replica, wait_replicas 1",
        primary: &[],
        replica: true,
        wait: true,
    },
    Setting {
        name: "appendfsync always + replica + wait_replicas 1",
        primary: AOF_ALWAYS,
        replica: true,
        wait: true,
    },
];

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1));
    sorted.get(i).copied().unwrap_or_default()
}

async fn wait_online(primary: &RedisServer) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !primary
        .cli(&["info", "replication"])
        .contains("state=online")
    {
        assert!(Instant::now() < deadline, "replica never online");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Calls/s and latencies of one setting.
async fn measure(setting: &Setting) -> (f64, Duration, Duration) {
    let primary = RedisServer::start_with(setting.primary);
    let port = primary.port.to_string();
    let _replica = if setting.replica {
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
        wait_online(&primary).await;
        Some(replica)
    } else {
        None
    };
    let mut node_config = config(vec![primary.url()], 1, &unique_prefix());
    if setting.wait {
        node_config.wait_replicas = Some(ReplicaWait {
            replicas: 1,
            timeout: Duration::from_secs(1),
        });
    }
    let node = Arc::new(RedisBroker::connect(node_config).await.unwrap());
    let q = QueueName::new("cost").unwrap();
    let deadline = Instant::now() + LENGTH;
    let mut tasks = Vec::new();
    for _ in 0..PRODUCERS {
        let (node, q) = (node.clone(), q.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let request = EnqueueRequest {
                    payload: vec![b'x'; 100],
                    ..Default::default()
                };
                let start = Instant::now();
                node.enqueue(&q, vec![request], EnqueueOptions::default())
                    .await
                    .unwrap();
                latencies.push(start.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    latencies.sort();
    let rate = latencies.len() as f64 / LENGTH.as_secs_f64();
    (
        rate,
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at start: {}", load.trim());
    let mut rates = vec![Vec::new(); SETTINGS.len()];
    let mut p50s = vec![Vec::new(); SETTINGS.len()];
    let mut p99s = vec![Vec::new(); SETTINGS.len()];
    for _ in 0..ROUNDS {
        for (i, setting) in SETTINGS.iter().enumerate() {
            let (rate, p50, p99) = measure(setting).await;
            rates[i].push(rate);
            p50s[i].push(p50);
            p99s[i].push(p99);
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let base = mean(&rates[0]);
    println!("enqueue calls of 1 message, {PRODUCERS} producers, {LENGTH:?} x {ROUNDS} rounds");
    for (i, setting) in SETTINGS.iter().enumerate() {
        println!(
            "{:48} {:7.0} calls/s  ratio {:.2}  p50 {:?}  p99 {:?}",
            setting.name,
            mean(&rates[i]),
            mean(&rates[i]) / base,
            p50s[i],
            p99s[i]
        );
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at end: {}", load.trim());
}
