//! Flow control across several RedisBroker nodes on one Redis: a queue's
//! `rate` is one limit for all of them (its bucket lives under the queue's
//! hash tag), and a node that dies holding leases keeps no slot beyond
//! those leases (a slot is a lease: its expiry frees it).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{broker, shared_single, unique_prefix};
use delayd_core::{
    Broker, EnqueueOptions, EnqueueRequest, FlowConfig, FlowKey, LeaseRequest, QueueConfigPatch,
    QueueName, Rate,
};
use delayd_redis::RedisBroker;

fn key(k: &str) -> FlowKey {
    FlowKey::new(k).expect("key")
}

async fn enqueue(node: &RedisBroker, q: &QueueName, n: usize, k: Option<&str>) {
    let batch = (0..n)
        .map(|_| EnqueueRequest {
            payload: b"x".to_vec(),
            key: k.map(key),
            ..EnqueueRequest::default()
        })
        .collect();
    for r in node
        .enqueue(q, batch, EnqueueOptions::default())
        .await
        .expect("enqueue")
    {
        r.expect("enqueue item");
    }
}

async fn flow_queue(node: &RedisBroker, q: &QueueName, lease_ms: u64, flow: FlowConfig) {
    let patch = QueueConfigPatch {
        lease_ms: Some(lease_ms),
        flow: Some(Some(flow)),
        ..QueueConfigPatch::default()
    };
    node.put_queue(q, patch).await.expect("put_queue");
}

/// Leases and acks on `node` until `deadline`, counting deliveries.
async fn consume(node: Arc<RedisBroker>, q: QueueName, count: Arc<AtomicUsize>, deadline: Instant) {
    while Instant::now() < deadline {
        let wait = deadline.saturating_duration_since(Instant::now());
        let request = LeaseRequest {
            max: 5,
            wait_ms: (wait.as_millis() as u64).min(200),
            lease_ms: None,
        };
        let got = node
            .lease(std::slice::from_ref(&q), request)
            .await
            .expect("lease");
        for d in got {
            count.fetch_add(1, Ordering::SeqCst);
            node.ack(&q, &d.id, &d.lease_id).await.expect("ack");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_is_one_limit_for_all_nodes() {
    let server = shared_single();
    let prefix = unique_prefix();
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(Arc::new(broker(vec![server.url()], 1, &prefix).await));
    }
    let q = QueueName::new("shared-rate").expect("queue");
    // The default burst (api.md): a token not taken the instant it comes
    // is not lost to a round trip to Redis.
    let rate = Rate {
        limit: 20,
        period_ms: 1_000,
        burst: Rate::default_burst(20, 1_000),
    };
    let flow = FlowConfig {
        rate: Some(rate),
        ..FlowConfig::default()
    };
    flow_queue(&nodes[0], &q, 30_000, flow).await;
    enqueue(&nodes[0], &q, 300, None).await;
    let count = Arc::new(AtomicUsize::new(0));
    let began = Instant::now();
    let deadline = began + Duration::from_millis(2_000);
    let consumers: Vec<_> = nodes
        .iter()
        .flat_map(|n| [n.clone(), n.clone()])
        .map(|n| tokio::spawn(consume(n, q.clone(), count.clone(), deadline)))
        .collect();
    for c in consumers {
        c.await.expect("consumer");
    }
    let elapsed = began.elapsed().as_millis() as u64;
    let delivered = count.load(Ordering::SeqCst) as u64;
    let bound = u64::from(rate.burst) + elapsed * u64::from(rate.limit) / rate.period_ms;
    println!("{delivered} deliveries in {elapsed} ms over 3 nodes, bound {bound}");
    assert!(
        delivered <= bound,
        "{delivered} deliveries over 3 nodes in {elapsed} ms exceed one limit's {bound}"
    );
    // The rate is shared, not stalled: a quarter of what the limit allows
    // is far below what three nodes deliver on a loaded machine (every
    // delivery is a few Redis round trips), so this bound does not depend
    // on the machine's speed; the upper bound above is the rate's rule.
    assert!(
        delivered * 4 >= bound,
        "only {delivered} deliveries in {elapsed} ms where {bound} were allowed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_slots_end_with_its_leases() {
    let server = shared_single();
    let prefix = unique_prefix();
    let survivor = broker(vec![server.url()], 1, &prefix).await;
    let q = QueueName::new("dead-node-slots").expect("queue");
    let flow = FlowConfig {
        concurrency: Some(2),
        key_concurrency: Some(1),
        ..FlowConfig::default()
    };
    let lease_ms = 1_000;
    flow_queue(&survivor, &q, lease_ms, flow).await;
    enqueue(&survivor, &q, 3, Some("a")).await;
    enqueue(&survivor, &q, 3, Some("b")).await;
    enqueue(&survivor, &q, 3, Some("c")).await;

    // A node takes both queue slots (one per key) and dies without a word.
    let doomed = broker(vec![server.url()], 1, &prefix).await;
    let leased_at = Instant::now();
    let taken = doomed
        .lease(
            std::slice::from_ref(&q),
            LeaseRequest {
                max: 10,
                wait_ms: 0,
                lease_ms: None,
            },
        )
        .await
        .expect("lease");
    assert_eq!(taken.len(), 2, "concurrency 2, one per key: {taken:?}");
    let held_keys: Vec<_> = taken.iter().filter_map(|d| d.key.clone()).collect();
    drop(doomed);

    // While the leases live, nothing more goes out.
    let none = survivor
        .lease(
            std::slice::from_ref(&q),
            LeaseRequest {
                max: 10,
                wait_ms: 300,
                lease_ms: None,
            },
        )
        .await
        .expect("lease");
    assert!(
        none.is_empty(),
        "slots taken by the dead node's leases: {none:?}"
    );
    for k in &held_keys {
        let info = survivor.key_info(&q, k).await.expect("key_info");
        assert_eq!(info.leased, 1, "{info:?}");
    }

    // Once they expire, both slots are free again, without the dead node.
    let got = survivor
        .lease(
            std::slice::from_ref(&q),
            LeaseRequest {
                max: 10,
                wait_ms: 5_000,
                lease_ms: None,
            },
        )
        .await
        .expect("lease");
    let waited = leased_at.elapsed();
    assert!(
        waited >= Duration::from_millis(lease_ms),
        "a slot was free before the lease ended ({waited:?}): {got:?}"
    );
    assert!(
        waited < Duration::from_millis(lease_ms + 1_500),
        "the slots stayed taken {waited:?} after leases of {lease_ms} ms"
    );
    assert!(!got.is_empty(), "no delivery after the leases expired");
    let mut more = got.clone();
    if more.len() < 2 {
        more.extend(
            survivor
                .lease(
                    std::slice::from_ref(&q),
                    LeaseRequest {
                        max: 10,
                        wait_ms: 1_000,
                        lease_ms: None,
                    },
                )
                .await
                .expect("lease"),
        );
    }
    assert_eq!(more.len(), 2, "both queue slots free again: {more:?}");
    let info = survivor.get_queue(&q).await.expect("get_queue");
    assert_eq!(info.stats.leased, 2, "{info:?}");
}
