//! Shard scaling on a 3-master Redis Cluster: one queue with 1 shard against
//! the same queue spread over 4 shards (hash tags `{prefix:queue#k}`), in
//! the same run and on the same cluster.
//!
//! For each shard count (fresh `key_prefix`): several producers enqueue
//! `MESSAGES` 100-byte messages due now in batches of 100, then several
//! consumers lease (max 100) and ack them until the queue is empty. Prints
//! enqueue and lease+ack msgs/s, the 4-shard/1-shard ratios, and which
//! master owns each shard's slot (with its message count).
//!
//! The bench starts its own cluster (3 `redis-server` processes on free
//! ports, never 6379, persistence off) and kills it on exit, also when the
//! bench process dies: each server runs under a shell that SIGKILLs it when
//! the bench's end of its stdin pipe closes.
//! Run: `cargo bench -p delayd-redis --bench shard_scaling`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use delayd_core::{
    Broker, EnqueueOptions, EnqueueRequest, LeaseRequest, QueueName, Schedule, SystemClock,
};
use delayd_redis::{RedisBroker, RedisConfig};
use futures_util::future::join_all;

// The tests' redis-server and cluster spawning, shared rather than copied.
#[path = "../tests/redis/support/mod.rs"]
mod support;
use support::RedisCluster;

const MESSAGES: usize = 200_000;
const PAYLOAD: usize = 100;
const BATCH: usize = 100;
const PRODUCERS: usize = 8;
const CONSUMERS: usize = 8;
const LEASE_MAX: u32 = 100;
const QUEUE: &str = "scale";

/// CPU seconds (user + sys) each master has used so far.
fn masters_cpu(cluster: &RedisCluster) -> Vec<f64> {
    cluster
        .nodes
        .iter()
        .map(|n| {
            n.cli(&["info", "cpu"])
                .lines()
                .filter(|l| l.starts_with("used_cpu_sys:") || l.starts_with("used_cpu_user:"))
                .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
                .sum()
        })
        .collect()
}

/// The master (index into `cluster.nodes`) that owns `slot`, from CLUSTER NODES.
fn owner(cluster: &RedisCluster, slot: u16) -> Option<usize> {
    let table = cluster.nodes[0].cli(&["cluster", "nodes"]);
    for line in table.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 9 || !fields[2].contains("master") {
            continue;
        }
        let port: u16 = fields[1]
            .split('@')
            .next()?
            .rsplit(':')
            .next()?
            .parse()
            .ok()?;
        let owns = fields[8..].iter().any(|range| {
            let mut it = range.split('-');
            let lo: u16 = it.next().and_then(|v| v.parse().ok()).unwrap_or(u16::MAX);
            let hi: u16 = it.next().and_then(|v| v.parse().ok()).unwrap_or(lo);
            (lo..=hi).contains(&slot)
        });
        if owns {
            return cluster.nodes.iter().position(|n| n.port == port);
        }
    }
    None
}

/// CPU seconds (user + sys) this bench process (the client) has used.
fn own_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are 11 and 12 after the ')'; ticks of 1/100 s.
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| f.get(i)?.parse::<f64>().ok())
        .sum();
    ticks / 100.0
}

/// Prints where a phase's CPU went: the client and each master.
fn cpu_report(phase: &str, cluster: &RedisCluster, client0: f64, nodes0: &[f64], secs: f64) {
    let nodes: Vec<String> = masters_cpu(cluster)
        .iter()
        .zip(nodes0)
        .enumerate()
        .map(|(i, (now, before))| format!("m{i} {:.2}", now - before))
        .collect();
    println!(
        "  {phase} CPU s over {secs:.2} s wall: client {:.2}, {}",
        own_cpu() - client0,
        nodes.join(", ")
    );
}

fn request() -> EnqueueRequest {
    EnqueueRequest {
        schedule: Schedule::Now,
        payload: vec![b'x'; PAYLOAD],
        ..Default::default()
    }
}

struct Outcome {
    enqueue: f64,
    lease_ack: f64,
}

async fn run(cluster: &RedisCluster, shards: u32) -> Outcome {
    let prefix = format!(
        "scale{}-{}-{}",
        std::process::id(),
        shards,
        rand::random::<u32>()
    );
    let node = Arc::new(
        RedisBroker::connect(RedisConfig {
            urls: cluster.urls(),
            shards,
            key_prefix: prefix.clone(),
            clock: Arc::new(SystemClock),
            tls_ca: None,
            virtual_time: false,
            wait_replicas: None,
        })
        .await
        .expect("connect"),
    );
    let q = QueueName::new(QUEUE).unwrap();
    // Creates the queue (and warms the connections) outside the timings.
    let warm = node
        .enqueue(&q, vec![request()], EnqueueOptions::default())
        .await
        .unwrap();
    let warm_id = warm[0].as_ref().unwrap().id.clone();
    let leased = node
        .lease_message(&q, &warm_id, None)
        .await
        .expect("lease warm-up message");
    node.ack(&q, &leased.id, &leased.lease_id).await.unwrap();

    let batches = MESSAGES / BATCH;
    let (client0, nodes0) = (own_cpu(), masters_cpu(cluster));
    let start = Instant::now();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (node, q) = (node.clone(), q.clone());
            tokio::spawn(async move {
                let mut b = p;
                while b < batches {
                    let batch = (0..BATCH).map(|_| request()).collect();
                    let out = node
                        .enqueue(&q, batch, EnqueueOptions::default())
                        .await
                        .unwrap();
                    assert!(out.iter().all(|r| r.is_ok()));
                    b += PRODUCERS;
                }
            })
        })
        .collect();
    for p in producers {
        p.await.unwrap();
    }
    let enq_secs = start.elapsed().as_secs_f64();
    cpu_report("enqueue", cluster, client0, &nodes0, enq_secs);

    // Where each shard lives, and how many messages it got.
    let mut per_node: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
    for k in 0..shards {
        let tag = format!("{{{prefix}:{QUEUE}#{k}}}");
        let slot: u16 = cluster.nodes[0]
            .cli(&["cluster", "keyslot", &tag])
            .trim()
            .parse()
            .expect("keyslot");
        let owner = owner(cluster, slot).expect("slot owner");
        let count = cluster.nodes[owner].cli(&["hlen", &format!("{tag}:msg")]);
        println!(
            "  shard {k}: tag {tag} slot {slot} -> master {owner} (port {}), {} messages",
            cluster.nodes[owner].port,
            count.trim()
        );
        per_node.entry(owner).or_default().push(k);
    }
    let registry = format!("{{{prefix}}}");
    let slot: u16 = cluster.nodes[0]
        .cli(&["cluster", "keyslot", &registry])
        .trim()
        .parse()
        .expect("keyslot");
    println!(
        "  registry/seq {registry}: slot {slot} -> master {}",
        owner(cluster, slot).expect("slot owner")
    );
    println!(
        "  shards per master: {}",
        (0..cluster.nodes.len())
            .map(|n| format!("m{n}={}", per_node.get(&n).map_or(0, Vec::len)))
            .collect::<Vec<_>>()
            .join(" ")
    );

    let (client0, nodes0) = (own_cpu(), masters_cpu(cluster));
    let start = Instant::now();
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let (node, q) = (node.clone(), q.clone());
            tokio::spawn(async move {
                let mut n = 0usize;
                loop {
                    let req = LeaseRequest {
                        max: LEASE_MAX,
                        wait_ms: 0,
                        lease_ms: None,
                    };
                    let got = node.lease(std::slice::from_ref(&q), req).await.unwrap();
                    if got.is_empty() {
                        return n;
                    }
                    n += got.len();
                    let acks = got.iter().map(|d| node.ack(&q, &d.id, &d.lease_id));
                    for r in join_all(acks).await {
                        r.unwrap();
                    }
                }
            })
        })
        .collect();
    let mut total = 0;
    for c in consumers {
        total += c.await.unwrap();
    }
    let la_secs = start.elapsed().as_secs_f64();
    cpu_report("lease+ack", cluster, client0, &nodes0, la_secs);
    assert_eq!(total, MESSAGES, "every message leased and acked once");

    let outcome = Outcome {
        enqueue: MESSAGES as f64 / enq_secs,
        lease_ack: MESSAGES as f64 / la_secs,
    };
    println!(
        "shards={shards}: enqueue {:.0} msg/s ({MESSAGES} msgs, {PRODUCERS} producers, batches of {BATCH}, {enq_secs:.2} s); \
         lease(max {LEASE_MAX})+ack {:.0} msg/s ({CONSUMERS} consumers, acks of a lease concurrent, {la_secs:.2} s)",
        outcome.enqueue, outcome.lease_ack
    );
    outcome
}

fn main() {
    let cluster = RedisCluster::start();
    println!(
        "3-master cluster on ports {:?}; {}",
        cluster.nodes.iter().map(|n| n.port).collect::<Vec<_>>(),
        cluster.nodes[0]
            .cli(&["info", "server"])
            .lines()
            .find(|l| l.starts_with("redis_version"))
            .unwrap_or("?")
            .trim()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (one, four) = runtime.block_on(async {
        let one = run(&cluster, 1).await;
        let four = run(&cluster, 4).await;
        (one, four)
    });
    drop(runtime);
    println!(
        "ratio 4 shards / 1 shard: enqueue {:.2}x, lease+ack {:.2}x",
        four.enqueue / one.enqueue,
        four.lease_ack / one.lease_ack
    );
    drop(cluster);
}
