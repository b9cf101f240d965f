//! Fairness of flow control on Redis (issue 29): with `key_concurrency: 1`,
//! one key with 100,000 ready messages must not delay other keys' due
//! messages: held messages are parked per key, so the lease function never
//! walks the heavy key's backlog again. Each of 100 other keys' messages is
//! delivered within 100 ms of its due time, and the heavy key's come one
//! at a time.
//!
//! Deterministic whatever the machine's load: the case runs on virtual time
//! (`RedisConfig::virtual_time`: a Redis call in flight holds the clock),
//! so lateness measures the broker's timers and wake-ups, and the work is
//! bounded by counting, not by timing: the lease function may look at (and
//! hold back) at most one heavy message per enqueue call
//! (`delayd_flow_held_total`), never the backlog.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{unique_prefix, RedisServer};
use delayd_core::testkit::support::{run_case_virtual_within, VirtualClock};
use delayd_core::Clock;
use delayd_core::{
    Broker, EnqueueOptions, EnqueueRequest, FlowConfig, FlowKey, LeaseRequest, MessageId,
    QueueConfigPatch, QueueName, Schedule,
};
use delayd_redis::RedisBroker;
use delayd_redis::RedisConfig;
use tokio::sync::Mutex;

const HEAVY: usize = 100_000;
const OTHERS: usize = 100;
const LATE_MS: u64 = 100;

fn message(k: &str, schedule: Schedule, id: Option<String>) -> EnqueueRequest {
    EnqueueRequest {
        id: id.map(|i| MessageId::new(i).expect("id")),
        schedule,
        payload: b"x".to_vec(),
        key: Some(FlowKey::new(k).expect("key")),
        ..EnqueueRequest::default()
    }
}

async fn enqueue(node: &RedisBroker, q: &QueueName, batch: Vec<EnqueueRequest>) {
    for r in node
        .enqueue(q, batch, EnqueueOptions::default())
        .await
        .expect("enqueue")
    {
        r.expect("enqueue item");
    }
}

struct Seen {
    /// Other keys' message id -> (its due time, when its lease returned).
    others: Mutex<BTreeMap<String, (u64, u64)>>,
    heavy_in_flight: AtomicUsize,
    heavy_delivered: AtomicUsize,
    stop: AtomicBool,
}

async fn consume(
    node: Arc<RedisBroker>,
    clock: Arc<VirtualClock>,
    q: QueueName,
    due: Arc<Mutex<BTreeMap<String, u64>>>,
    seen: Arc<Seen>,
) {
    while !seen.stop.load(Ordering::SeqCst) {
        let request = LeaseRequest {
            max: 10,
            wait_ms: 200,
            lease_ms: None,
        };
        let got = node
            .lease(std::slice::from_ref(&q), request)
            .await
            .expect("lease");
        let returned = clock.now_ms();
        for d in got {
            if d.key.as_ref().map(FlowKey::as_str) == Some("heavy") {
                let before = seen.heavy_in_flight.fetch_add(1, Ordering::SeqCst);
                assert_eq!(before, 0, "two heavy messages leased at once");
                seen.heavy_delivered.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                seen.heavy_in_flight.fetch_sub(1, Ordering::SeqCst);
            } else {
                let at = due.lock().await.get(d.id.as_str()).copied().unwrap_or(0);
                seen.others
                    .lock()
                    .await
                    .insert(d.id.to_string(), (at, returned));
            }
            node.ack(&q, &d.id, &d.lease_id).await.expect("ack");
        }
    }
}

/// Messages per enqueue call (`ENQUEUE_CHUNK` in src/messages.rs): each
/// call may leave one heavy message in ready for the lease loop to park.
const PER_CALL: usize = 100;

#[test]
fn a_heavy_key_does_not_delay_other_keys() {
    run_case_virtual_within(Duration::from_secs(3_600), |clock| async move {
        heavy_key_case(clock).await;
    });
}

async fn heavy_key_case(clock: Arc<VirtualClock>) {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _guard = metrics::set_default_local_recorder(&recorder);
    // Its own server: 100,000 messages would hold up the shared one's
    // other tests, which run on real time.
    let server = RedisServer::start();
    let config = RedisConfig {
        urls: vec![server.url()],
        shards: 1,
        key_prefix: unique_prefix(),
        clock: clock.clone(),
        tls_ca: None,
        virtual_time: true,
        wait_replicas: None,
    };
    let node = Arc::new(RedisBroker::connect(config).await.expect("connect"));
    let q = QueueName::new("fair").expect("queue");
    let patch = QueueConfigPatch {
        flow: Some(Some(FlowConfig {
            key_concurrency: Some(1),
            ..FlowConfig::default()
        })),
        ..QueueConfigPatch::default()
    };
    node.put_queue(&q, patch).await.expect("put_queue");
    for chunk in 0..HEAVY / 1_000 {
        let batch = (0..1_000)
            .map(|i| message("heavy", Schedule::Now, Some(format!("h{chunk}-{i}"))))
            .collect();
        enqueue(&node, &q, batch).await;
    }
    let due: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let seen = Arc::new(Seen {
        others: Mutex::default(),
        heavy_in_flight: AtomicUsize::new(0),
        heavy_delivered: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
    });
    let consumers: Vec<_> = (0..4)
        .map(|_| {
            let (node, clock, q, due, seen) = (
                node.clone(),
                clock.clone(),
                q.clone(),
                due.clone(),
                seen.clone(),
            );
            tokio::spawn(consume(node, clock, q, due, seen))
        })
        .collect();
    // The other keys' messages come due one by one while the heavy key's
    // backlog is being worked through.
    let start = clock.now_ms() + 500;
    for i in 0..OTHERS {
        let at = start + 20 * i as u64;
        let id = format!("o{i}");
        due.lock().await.insert(id.clone(), at);
        enqueue(
            &node,
            &q,
            vec![message(&format!("k{i}"), Schedule::At(at), Some(id))],
        )
        .await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while seen.others.lock().await.len() < OTHERS && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    seen.stop.store(true, Ordering::SeqCst);
    for c in consumers {
        c.await.expect("consumer");
    }
    let others = seen.others.lock().await;
    assert_eq!(others.len(), OTHERS, "every other key's message delivered");
    let late: Vec<_> = others
        .iter()
        .filter(|(_, (at, got))| got.saturating_sub(*at) > LATE_MS)
        .collect();
    let worst = others
        .values()
        .map(|(at, got)| got.saturating_sub(*at))
        .max();
    let held: u64 = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == delayd_core::metric::FLOW_HELD_TOTAL)
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => n,
            _ => 0,
        })
        .sum();
    let heavy = seen.heavy_delivered.load(Ordering::SeqCst);
    println!("worst lateness {worst:?} ms (virtual); heavy delivered {heavy}; held back {held}");
    assert!(
        late.is_empty(),
        "delivered more than {LATE_MS} ms late: {late:?}"
    );
    assert!(heavy > 10, "the heavy key made progress");
    let calls = (HEAVY / PER_CALL + OTHERS) as u64;
    assert!(
        held <= calls + heavy as u64,
        "the lease function held back {held} messages: it walks the heavy key's backlog \
         (at most {calls} enqueue calls + {heavy} deliveries expected)"
    );
}
