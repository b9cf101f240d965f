//! Push pushback: one tenant's 429s must not slow the others, kill a
//! message or spend an attempt (flow control's "push pushback" target).
//!
//! `--messages` messages (default 10,000) over `--keys` keys (default 100,
//! message `i` has key `k{i % keys}`), all due at once, pushed from a
//! LocalBroker to a receiver in this process, on a queue with `flow` set
//! (no limit that binds: deferrals then give the attempt back and cool only
//! their key). Two runs on the same broker, fresh queue each:
//!
//! 1. `baseline`: the receiver answers 200 to every request (the first
//!    `--refused` keys are only counted apart);
//! 2. `pushback`: for the first `--refuse-for` seconds (default 3) it
//!    answers `429` with `Retry-After: 1` to every request of the first
//!    `--refused` keys (default 10), then 200.
//!
//! Reported per run: the time until every message of the other keys was
//! received (and its rate), the time until all were received, the 429s
//! sent, the deliveries whose `delayd-attempt` was not 1, and the dead.
//! Targets: the other keys' time within the baseline's, 0 dead, every
//! attempt 1.
//!
//! `cargo bench -p delayd-push --bench push_pushback -- [--messages N]
//! [--keys K] [--refused R] [--refuse-for S] [--concurrency C]
//! [--rounds N] [--durability always|never]`

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use delayd_core::{
    Broker, EnqueueOptions, EnqueueRequest, FlowConfig, FlowKey, PushConfig, QueueConfigPatch,
    QueueName, Schedule,
};
use delayd_local::{Durability, LocalBroker, LocalConfig};
use delayd_push::{PushDispatcher, PushOptions, PushPolicy};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

struct Args {
    messages: u64,
    keys: u64,
    refused: u64,
    refuse_for: Duration,
    concurrency: u32,
    durability: Durability,
    rounds: u32,
}

fn parse_args() -> Args {
    let mut args = Args {
        messages: 10_000,
        keys: 100,
        refused: 10,
        refuse_for: Duration::from_secs(3),
        concurrency: 64,
        durability: Durability::Always,
        rounds: 2,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_default();
        match flag.as_str() {
            "--messages" => args.messages = value().parse().unwrap_or(args.messages),
            "--keys" => args.keys = value().parse().unwrap_or(args.keys).max(1),
            "--refused" => args.refused = value().parse().unwrap_or(args.refused),
            "--refuse-for" => {
                let secs = value().parse().unwrap_or(args.refuse_for.as_secs());
                args.refuse_for = Duration::from_secs(secs);
            }
            "--concurrency" => args.concurrency = value().parse().unwrap_or(args.concurrency),
            "--rounds" => args.rounds = value().parse().unwrap_or(args.rounds),
            "--durability" => {
                args.durability = match value().as_str() {
                    "never" => Durability::Never,
                    _ => Durability::Always,
                }
            }
            _ => {} // `--bench` and friends from cargo
        }
    }
    args
}

/// What the receiver saw in one run.
struct Seen {
    /// Keys refused until `refuse_until`.
    refused: HashSet<String>,
    refuse_until: Mutex<Option<Instant>>,
    /// Whether `refused` keys are refused in this run.
    refusing: bool,
    started: Mutex<Instant>,
    /// Accepted deliveries: of the other keys, of all keys.
    others: AtomicU64,
    all: AtomicU64,
    others_total: u64,
    all_total: u64,
    others_done: Mutex<Option<Duration>>,
    all_done: Notify,
    refusals: AtomicU64,
    not_first_attempt: AtomicU64,
    ids: Mutex<HashSet<String>>,
}

/// Distinguishes the queues of one round from the next.
fn next_suffix() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::SeqCst)
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

async fn receive(seen: Arc<Seen>, headers: HeaderMap) -> Response {
    let key = header(&headers, "delayd-key");
    let refused = seen.refused.contains(key);
    let refusing = seen.refusing
        && seen
            .refuse_until
            .lock()
            .map(|until| until.is_some_and(|t| Instant::now() < t))
            .unwrap_or(false);
    if refused && refusing {
        seen.refusals.fetch_add(1, Ordering::SeqCst);
        let mut response = StatusCode::TOO_MANY_REQUESTS.into_response();
        response
            .headers_mut()
            .insert("retry-after", HeaderValue::from_static("1"));
        return response;
    }
    if header(&headers, "delayd-attempt") != "1" {
        seen.not_first_attempt.fetch_add(1, Ordering::SeqCst);
    }
    let first = seen
        .ids
        .lock()
        .map(|mut ids| ids.insert(header(&headers, "delayd-id").to_owned()))
        .unwrap_or(false);
    if first {
        let elapsed = seen.started.lock().map(|s| s.elapsed()).unwrap_or_default();
        if !refused && seen.others.fetch_add(1, Ordering::SeqCst) + 1 == seen.others_total {
            if let Ok(mut done) = seen.others_done.lock() {
                *done = Some(elapsed);
            }
        }
        if seen.all.fetch_add(1, Ordering::SeqCst) + 1 == seen.all_total {
            seen.all_done.notify_one();
        }
    }
    StatusCode::OK.into_response()
}

async fn start_receiver(seen: Arc<Seen>) -> String {
    let app =
        axum::Router::new().fallback(move |headers: HeaderMap| receive(Arc::clone(&seen), headers));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the receiver");
    let addr = listener.local_addr().expect("receiver address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/hook")
}

/// One run; `refuse`: whether the first `--refused` keys are refused (else
/// they are only counted apart, so both runs time the same messages).
async fn run(broker: &Arc<dyn Broker>, args: &Args, name: &str, refuse: bool) {
    let refused_keys: HashSet<String> = (0..args.refused).map(|k| format!("k{k}")).collect();
    let refused_messages = (0..args.messages)
        .filter(|i| refused_keys.contains(&format!("k{}", i % args.keys)))
        .count() as u64;
    let seen = Arc::new(Seen {
        refused: refused_keys,
        refuse_until: Mutex::new(None),
        refusing: refuse,
        started: Mutex::new(Instant::now()),
        others: AtomicU64::new(0),
        all: AtomicU64::new(0),
        others_total: args.messages - refused_messages,
        all_total: args.messages,
        others_done: Mutex::new(None),
        all_done: Notify::new(),
        refusals: AtomicU64::new(0),
        not_first_attempt: AtomicU64::new(0),
        ids: Mutex::new(HashSet::new()),
    });
    let url = start_receiver(Arc::clone(&seen)).await;
    let queue = QueueName::new(format!("pushback-{name}-{}", next_suffix())).expect("queue name");
    let patch = QueueConfigPatch {
        push: Some(Some(PushConfig {
            url,
            timeout_ms: 10_000,
            concurrency: args.concurrency,
            secret: None,
            headers: Default::default(),
        })),
        flow: Some(Some(FlowConfig::default())),
        ..Default::default()
    };
    broker.put_queue(&queue, patch).await.expect("put queue");
    broker.pause(&queue, None).await.expect("pause");
    for first in (0..args.messages).step_by(1000) {
        let requests = (first..(first + 1000).min(args.messages))
            .map(|i| EnqueueRequest {
                schedule: Schedule::Now,
                payload: br#"{"order":42,"action":"remind"}"#.to_vec(),
                key: Some(FlowKey::new(format!("k{}", i % args.keys)).expect("key")),
                ..Default::default()
            })
            .collect();
        broker
            .enqueue(&queue, requests, EnqueueOptions::default())
            .await
            .expect("enqueue");
    }
    let shutdown = CancellationToken::new();
    let policy = Arc::new(PushPolicy::new(&["127.0.0.1/32".to_owned()]).expect("policy"));
    let dispatcher = PushDispatcher::start(
        Arc::clone(broker),
        policy,
        PushOptions::default(),
        shutdown.clone(),
    );
    let started = Instant::now();
    if let Ok(mut s) = seen.started.lock() {
        *s = started;
    }
    if let Ok(mut until) = seen.refuse_until.lock() {
        *until = Some(started + args.refuse_for);
    }
    broker.resume(&queue).await.expect("resume");
    let all_in_time = tokio::time::timeout(
        args.refuse_for + Duration::from_secs(60),
        seen.all_done.notified(),
    )
    .await
    .is_ok();
    let all = started.elapsed();
    shutdown.cancel();
    dispatcher.join().await;
    let stats = broker.get_queue(&queue).await.expect("stats").stats;
    let others = seen.others_done.lock().ok().and_then(|d| *d);
    let others_text = others.map_or("never".to_owned(), |d| {
        format!(
            "{:.2?} ({:.0}/s)",
            d,
            seen.others_total as f64 / d.as_secs_f64()
        )
    });
    println!(
        "{name}: {} messages over {} keys, {} refused: the other keys' {} received in {}; \
         all {} in {:.2?}{}; 429s sent {}, deliveries with attempt > 1: {}, dead {}",
        args.messages,
        args.keys,
        if refuse { args.refused } else { 0 },
        seen.others_total,
        others_text,
        seen.all.load(Ordering::SeqCst),
        all,
        if all_in_time { "" } else { " (timed out)" },
        seen.refusals.load(Ordering::SeqCst),
        seen.not_first_attempt.load(Ordering::SeqCst),
        stats.dead,
    );
}

fn main() {
    let args = parse_args();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = LocalConfig::new(dir.path());
        config.durability = args.durability;
        let broker: Arc<dyn Broker> =
            Arc::new(LocalBroker::open(config).await.expect("open LocalBroker"));
        println!(
            "LocalBroker, durability {:?}, push concurrency {}",
            args.durability, args.concurrency
        );
        for _ in 0..args.rounds {
            run(&broker, &args, "baseline", false).await;
            run(&broker, &args, "pushback", true).await;
        }
        broker.shutdown().await.expect("shutdown");
    });
}
