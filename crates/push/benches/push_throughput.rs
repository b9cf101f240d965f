//! Push benchmark against a LocalBroker and a local receiver that answers
//! 200 at once (both in this process, on the same runtime).
//!
//! 1. Throughput: `--messages` due messages are enqueued first, then the
//!    dispatcher starts; measured until the receiver has seen them all and
//!    until all are acked.
//! 2. Lateness: messages are enqueued at `--rate` per second for
//!    `--seconds`, each due 100 ms after its enqueue; lateness is the
//!    receiver's wall clock minus `delayd-deliver-at`.
//!
//! `cargo bench -p delayd-push --bench push_throughput -- [--messages N]
//! [--concurrency C] [--rate R] [--seconds S] [--durability always|never]
//! [--broker local|null]`: `null` is a do-nothing in-memory broker
//! (throughput only), to measure the dispatcher and HTTP alone.

#[path = "support/null_broker.rs"]
mod null_broker;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::http::HeaderMap;
use delayd_core::{
    Broker, EnqueueOptions, EnqueueRequest, PushConfig, QueueConfigPatch, QueueName, Schedule,
};
use delayd_local::{Durability, LocalBroker, LocalConfig};
use delayd_push::{PushDispatcher, PushOptions, PushPolicy};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

struct Args {
    messages: u64,
    concurrency: u32,
    rate: u64,
    seconds: u64,
    durability: Durability,
    null_broker: bool,
}

fn parse_args() -> Args {
    let mut args = Args {
        messages: 50_000,
        concurrency: 256,
        rate: 5_000,
        seconds: 5,
        durability: Durability::Always,
        null_broker: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_default();
        match flag.as_str() {
            "--messages" => args.messages = value().parse().unwrap_or(args.messages),
            "--concurrency" => args.concurrency = value().parse().unwrap_or(args.concurrency),
            "--rate" => args.rate = value().parse().unwrap_or(args.rate),
            "--seconds" => args.seconds = value().parse().unwrap_or(args.seconds),
            "--durability" => {
                args.durability = match value().as_str() {
                    "never" => Durability::Never,
                    _ => Durability::Always,
                }
            }
            "--broker" => args.null_broker = value() == "null",
            _ => {} // `--bench` and friends from cargo
        }
    }
    args
}

#[derive(Default)]
struct Seen {
    count: AtomicU64,
    target: AtomicU64,
    reached: Notify,
    lateness_ms: Mutex<Vec<f64>>,
}

fn wall_ms_f64() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

async fn receive(seen: Arc<Seen>, headers: HeaderMap) -> &'static str {
    let now = wall_ms_f64();
    if let Some(at) = headers
        .get("delayd-deliver-at")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<f64>().ok())
    {
        if let Ok(mut l) = seen.lateness_ms.lock() {
            l.push(now - at);
        }
    }
    let n = seen.count.fetch_add(1, Ordering::SeqCst) + 1;
    if n == seen.target.load(Ordering::SeqCst) {
        seen.reached.notify_one();
    }
    ""
}

async fn start_receiver(seen: Arc<Seen>) -> String {
    let app =
        axum::Router::new().fallback(move |headers: HeaderMap| receive(Arc::clone(&seen), headers));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/hook")
}

async fn push_queue(
    broker: &Arc<dyn Broker>,
    name: &str,
    url: &str,
    concurrency: u32,
) -> QueueName {
    let queue = QueueName::new(name).unwrap();
    let patch = QueueConfigPatch {
        push: Some(Some(PushConfig {
            url: url.to_owned(),
            timeout_ms: 10_000,
            concurrency,
            secret: Some("bench-secret".into()),
            headers: Default::default(),
        })),
        ..Default::default()
    };
    broker.put_queue(&queue, patch).await.unwrap();
    queue
}

fn requests(n: u64, schedule: Schedule) -> Vec<EnqueueRequest> {
    (0..n)
        .map(|_| EnqueueRequest {
            schedule,
            payload: br#"{"order":42,"action":"remind"}"#.to_vec(),
            ..Default::default()
        })
        .collect()
}

async fn wait_empty(broker: &Arc<dyn Broker>, queue: &QueueName) {
    loop {
        let s = broker.get_queue(queue).await.unwrap().stats;
        if s.scheduled + s.ready + s.leased == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

async fn throughput(broker: &Arc<dyn Broker>, url: &str, seen: &Arc<Seen>, args: &Args) {
    let queue = push_queue(broker, "bench-throughput", url, args.concurrency).await;
    for chunk in 0..args.messages.div_ceil(1000) {
        let n = (args.messages - chunk * 1000).min(1000);
        broker
            .enqueue(
                &queue,
                requests(n, Schedule::Now),
                EnqueueOptions::default(),
            )
            .await
            .unwrap();
    }
    seen.count.store(0, Ordering::SeqCst);
    seen.target.store(args.messages, Ordering::SeqCst);
    let shutdown = CancellationToken::new();
    let policy = Arc::new(PushPolicy::new(&["127.0.0.1/32".to_owned()]).unwrap());
    let started = Instant::now();
    let dispatcher = PushDispatcher::start(
        Arc::clone(broker),
        policy,
        PushOptions::default(),
        shutdown.clone(),
    );
    seen.reached.notified().await;
    let received = started.elapsed();
    wait_empty(broker, &queue).await;
    let acked = started.elapsed();
    shutdown.cancel();
    dispatcher.join().await;
    let rate = |d: Duration| args.messages as f64 / d.as_secs_f64();
    println!(
        "throughput: {} messages, concurrency {}: received in {:.2?} ({:.0}/s), all acked in {:.2?} ({:.0}/s)",
        args.messages, args.concurrency, received, rate(received), acked, rate(acked)
    );
}

async fn lateness(broker: &Arc<dyn Broker>, url: &str, seen: &Arc<Seen>, args: &Args) {
    let queue = push_queue(broker, "bench-paced", url, args.concurrency).await;
    let total = args.rate * args.seconds;
    seen.count.store(0, Ordering::SeqCst);
    seen.target.store(total, Ordering::SeqCst);
    if let Ok(mut l) = seen.lateness_ms.lock() {
        l.clear();
    }
    let shutdown = CancellationToken::new();
    let policy = Arc::new(PushPolicy::new(&["127.0.0.1/32".to_owned()]).unwrap());
    let dispatcher = PushDispatcher::start(
        Arc::clone(broker),
        policy,
        PushOptions::default(),
        shutdown.clone(),
    );
    // 10 ms ticks, rate/100 messages each, due 100 ms later.
    let per_tick = (args.rate / 100).max(1);
    let mut ticker = tokio::time::interval(Duration::from_millis(10));
    let mut sent = 0;
    while sent < total {
        ticker.tick().await;
        let n = per_tick.min(total - sent);
        broker
            .enqueue(
                &queue,
                requests(n, Schedule::Delay(100)),
                EnqueueOptions::default(),
            )
            .await
            .unwrap();
        sent += n;
    }
    let _ = tokio::time::timeout(Duration::from_secs(30), seen.reached.notified()).await;
    shutdown.cancel();
    dispatcher.join().await;
    let mut l = seen
        .lateness_ms
        .lock()
        .map(|l| l.clone())
        .unwrap_or_default();
    l.sort_by(f64::total_cmp);
    println!(
        "lateness at {}/s for {} s ({} received of {}): p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms, min {:.2} ms",
        args.rate,
        args.seconds,
        l.len(),
        total,
        percentile(&l, 50.0),
        percentile(&l, 99.0),
        percentile(&l, 99.9),
        percentile(&l, 100.0),
        l.first().copied().unwrap_or(f64::NAN),
    );
}

fn main() {
    let args = parse_args();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let seen = Arc::new(Seen::default());
        let url = start_receiver(Arc::clone(&seen)).await;
        if args.null_broker {
            println!("null broker");
            let null = Arc::new(null_broker::NullBroker::default());
            let broker: Arc<dyn Broker> = Arc::clone(&null) as Arc<dyn Broker>;
            throughput(&broker, &url, &seen, &args).await;
            let batches = null.lease_batches.load(Ordering::Relaxed).max(1);
            println!(
                "{:.1} messages per lease call",
                args.messages as f64 / batches as f64
            );
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mut config = LocalConfig::new(dir.path());
        config.durability = args.durability;
        let broker: Arc<dyn Broker> = Arc::new(LocalBroker::open(config).await.unwrap());
        println!("LocalBroker, durability {:?}", args.durability);
        throughput(&broker, &url, &seen, &args).await;
        lateness(&broker, &url, &seen, &args).await;
        broker.shutdown().await.unwrap();
    });
}
