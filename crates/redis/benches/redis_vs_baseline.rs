//! RedisBroker against the classic design on the same Redis: a delayed ZSET
//! moved to a ready LIST by a Lua script polled every 10 ms, consumed with
//! LMOVE into a processing list and acked with LREM (a "reliable queue").
//!
//! Measures lease+ack throughput, paced lateness (messages due every few ms
//! while consumers wait) and Redis memory per pending message.
//! First, the delivery-path workload (`workload`: 200,000 jobs, delays
//! 1-3 s, batched producers, 32 consumer loops; env `JOBS`, `RATE`) at full
//! rate and paced, on a Redis without persistence and on one with
//! `appendfsync everysec`; `-- workload` runs only that part.
//! Run: `cargo bench -p delayd-redis --bench redis_vs_baseline`.

#[path = "../tests/redis/support/mod.rs"]
mod support;
mod workload;

use std::sync::Arc;
use std::time::{Duration, Instant};

use delayd_core::{
    Broker, Clock, EnqueueOptions, EnqueueRequest, LeaseRequest, QueueName, Schedule, SystemClock,
};
use redis::aio::MultiplexedConnection;
use support::{broker, unique_prefix, RedisServer};

const THROUGHPUT_MESSAGES: usize = 5_000;
const CONSUMERS: usize = 4;
const PACED_MESSAGES: usize = 500;
const PACE_MS: u64 = 4;
const MEMORY_MESSAGES: usize = 20_000;

fn now() -> u64 {
    SystemClock.now_ms()
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(0)
}

fn report(name: &str, mut late: Vec<u64>) {
    late.sort_unstable();
    println!(
        "{name}: lateness ms p50 {} p99 {} max {} (n={})",
        percentile(&late, 0.5),
        percentile(&late, 0.99),
        late.last().copied().unwrap_or(0),
        late.len()
    );
}

async fn used_memory(conn: &mut MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

fn request(schedule: Schedule) -> EnqueueRequest {
    EnqueueRequest {
        schedule,
        payload: vec![b'x'; 16],
        ..Default::default()
    }
}

async fn delayd_throughput(url: &str) {
    let node = Arc::new(broker(vec![url.to_owned()], 1, &unique_prefix()).await);
    let q = QueueName::new("tp").unwrap();
    let start = Instant::now();
    for _ in 0..THROUGHPUT_MESSAGES / 100 {
        let batch = (0..100).map(|_| request(Schedule::Now)).collect();
        node.enqueue(&q, batch, EnqueueOptions::default())
            .await
            .unwrap();
    }
    let enq = start.elapsed();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONSUMERS {
        let (node, q) = (node.clone(), q.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            loop {
                let req = LeaseRequest {
                    max: 10,
                    wait_ms: 0,
                    lease_ms: None,
                };
                let got = node.lease(std::slice::from_ref(&q), req).await.unwrap();
                if got.is_empty() {
                    return n;
                }
                for d in got {
                    node.ack(&q, &d.id, &d.lease_id).await.unwrap();
                    n += 1;
                }
            }
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "delayd: enqueue {:.0} msg/s (batches of 100); lease(max 10)+ack {:.0} msg/s ({total} msgs, {CONSUMERS} consumers)",
        THROUGHPUT_MESSAGES as f64 / enq.as_secs_f64(),
        total as f64 / secs
    );
}

async fn baseline_throughput(conn: &MultiplexedConnection) {
    let mut c = conn.clone();
    for i in 0..THROUGHPUT_MESSAGES {
        let _: () = redis::pipe()
            .hset("b:payload", i, "xxxxxxxxxxxxxxxx")
            .lpush("b:ready", i)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONSUMERS {
        let mut c = conn.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            loop {
                let id: Option<String> = redis::cmd("LMOVE")
                    .arg("b:ready")
                    .arg("b:processing")
                    .arg("RIGHT")
                    .arg("LEFT")
                    .query_async(&mut c)
                    .await
                    .unwrap();
                let Some(id) = id else { return n };
                let _: Option<String> = redis::cmd("HGET")
                    .arg("b:payload")
                    .arg(&id)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                let _: () = redis::pipe()
                    .lrem("b:processing", 1, &id)
                    .hdel("b:payload", &id)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                n += 1;
            }
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    println!(
        "baseline: LMOVE+HGET+ack {:.0} msg/s ({total} msgs, {CONSUMERS} consumers)",
        total as f64 / start.elapsed().as_secs_f64()
    );
}

async fn delayd_paced(url: &str) {
    let node = Arc::new(broker(vec![url.to_owned()], 1, &unique_prefix()).await);
    let q = QueueName::new("paced").unwrap();
    let base = now() + 500;
    let batch: Vec<_> = (0..PACED_MESSAGES)
        .map(|i| request(Schedule::At(base + i as u64 * PACE_MS)))
        .collect();
    node.enqueue(&q, batch, EnqueueOptions::default())
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..CONSUMERS {
        let (node, q) = (node.clone(), q.clone());
        tasks.push(tokio::spawn(async move {
            let mut late = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                let req = LeaseRequest {
                    max: 1,
                    wait_ms: 1_000,
                    lease_ms: None,
                };
                let got = node.lease(std::slice::from_ref(&q), req).await.unwrap();
                let t = now();
                if got.is_empty() && t > base + PACED_MESSAGES as u64 * PACE_MS + 500 {
                    break;
                }
                for d in got {
                    late.push(t.saturating_sub(d.deliver_at));
                    node.ack(&q, &d.id, &d.lease_id).await.unwrap();
                }
            }
            late
        }));
    }
    let mut late = Vec::new();
    for t in tasks {
        late.extend(t.await.unwrap());
    }
    report("delayd paced", late);
}

/// Each consumer and the mover get their own connection: BLMOVE blocks
/// the connection it runs on.
async fn baseline_paced(client: &redis::Client) {
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let base = now() + 500;
    for i in 0..PACED_MESSAGES {
        let _: () = redis::cmd("ZADD")
            .arg("p:delayed")
            .arg(base + i as u64 * PACE_MS)
            .arg(format!("{i}:{}", base + i as u64 * PACE_MS))
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let stop =
        Instant::now() + Duration::from_millis(500 + PACED_MESSAGES as u64 * PACE_MS + 1_000);
    let mover = {
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        tokio::spawn(async move {
            let script = redis::Script::new(workload::MOVER);
            while Instant::now() < stop {
                let _: u64 = script
                    .key("p:delayed")
                    .key("p:ready")
                    .arg(now())
                    .invoke_async(&mut c)
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let mut tasks = Vec::new();
    for _ in 0..CONSUMERS {
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        tasks.push(tokio::spawn(async move {
            let mut late = Vec::new();
            while Instant::now() < stop {
                let id: Option<String> = redis::cmd("BLMOVE")
                    .arg("p:ready")
                    .arg("p:processing")
                    .arg("RIGHT")
                    .arg("LEFT")
                    .arg(0.1)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                let t = now();
                let Some(id) = id else { continue };
                let due: u64 = id.split(':').nth(1).and_then(|d| d.parse().ok()).unwrap();
                late.push(t.saturating_sub(due));
                let _: () = redis::cmd("LREM")
                    .arg("p:processing")
                    .arg(1)
                    .arg(&id)
                    .query_async(&mut c)
                    .await
                    .unwrap();
            }
            late
        }));
    }
    let mut late = Vec::new();
    for t in tasks {
        late.extend(t.await.unwrap());
    }
    mover.await.unwrap();
    report("baseline paced (10 ms poll)", late);
}

async fn memory(url: &str, conn: &MultiplexedConnection) {
    let mut c = conn.clone();
    let _: () = redis::cmd("FLUSHALL").query_async(&mut c).await.unwrap();
    let before = used_memory(&mut c).await;
    let node = broker(vec![url.to_owned()], 1, &unique_prefix()).await;
    let q = QueueName::new("mem").unwrap();
    for _ in 0..MEMORY_MESSAGES / 500 {
        let batch = (0..500)
            .map(|_| request(Schedule::Delay(3_600_000)))
            .collect();
        node.enqueue(&q, batch, EnqueueOptions::default())
            .await
            .unwrap();
    }
    let after = used_memory(&mut c).await;
    println!(
        "delayd: {} bytes per pending message (16-byte payload, generated UUID ids, n={MEMORY_MESSAGES})",
        (after - before) / MEMORY_MESSAGES as u64
    );
    drop(node);
    let _: () = redis::cmd("FLUSHALL").query_async(&mut c).await.unwrap();
    let before = used_memory(&mut c).await;
    let due = now() + 3_600_000;
    for chunk in 0..MEMORY_MESSAGES / 500 {
        let mut pipe = redis::pipe();
        for i in 0..500 {
            let id = uuid_like(chunk * 500 + i);
            pipe.zadd("m:delayed", &id, due)
                .ignore()
                .hset("m:payload", &id, "xxxxxxxxxxxxxxxx")
                .ignore();
        }
        let _: () = pipe.query_async(&mut c).await.unwrap();
    }
    let after = used_memory(&mut c).await;
    println!(
        "baseline: {} bytes per pending message (ZSET member + payload hash field)",
        (after - before) / MEMORY_MESSAGES as u64
    );
}

/// A 36-character id, the size of the UUIDs delayd generates.
fn uuid_like(i: usize) -> String {
    format!("0192f3a4-0000-7000-8000-{i:012}")
}

/// The workload on both designs, max rate then paced, per Redis setting.
async fn run_workload() {
    let settings = workload::Settings::from_env();
    for (name, extra) in [
        ("no persistence", &[][..]),
        (
            "appendfsync everysec",
            &["--appendonly", "yes", "--appendfsync", "everysec"][..],
        ),
    ] {
        let server = RedisServer::start_with(extra);
        println!(
            "\nworkload: {} jobs, Redis {name} (load {})",
            settings.jobs,
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .trim()
        );
        // QUICK=1: delayd at full rate only, without persistence (for
        // profiling iterations).
        let quick = std::env::var_os("QUICK").is_some();
        let rates: &[u64] = if quick { &[0] } else { &[0, settings.rate] };
        for &rate in rates {
            let paced = workload::Settings {
                jobs: settings.jobs,
                rate,
            };
            let mode = if rate == 0 {
                "max".to_owned()
            } else {
                format!("{rate}/s")
            };
            workload::delayd(
                &server.url(),
                &unique_prefix(),
                &format!("delayd {mode}"),
                &paced,
            )
            .await
            .print();
            if !quick {
                workload::baseline(
                    &server.url(),
                    &unique_prefix(),
                    &format!("zset+mover {mode}"),
                    &paced,
                )
                .await
                .print();
            }
        }
        if quick {
            break;
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    run_workload().await;
    if std::env::args().any(|a| a == "workload") {
        return;
    }
    let server = RedisServer::start();
    let client = redis::Client::open(server.url()).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    println!(
        "redis-server {}",
        server
            .cli(&["info", "server"])
            .lines()
            .find(|l| l.starts_with("redis_version"))
            .unwrap_or("?")
            .trim()
    );
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn.clone())
        .await
        .unwrap();
    delayd_throughput(&server.url()).await;
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn.clone())
        .await
        .unwrap();
    for line in stats.lines().filter(|l| l.starts_with("cmdstat_evalsha")) {
        println!("delayd throughput phase, server side: {}", line.trim());
    }
    baseline_throughput(&conn).await;
    delayd_paced(&server.url()).await;
    baseline_paced(&client).await;
    memory(&server.url(), &conn).await;
}
