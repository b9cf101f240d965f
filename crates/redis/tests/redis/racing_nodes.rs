//! Several RedisBroker nodes sharing one deployment: racing to lease the
//! same messages, every message is delivered and none twice; a node whose
//! shard count differs from the deployment's is refused.

use crate::support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{broker, shared_single, unique_prefix};
use delayd_core::{
    Broker, EnqueueOptions, EnqueueRequest, LeaseRequest, MessageId, QueueConfigPatch, QueueName,
    Schedule,
};
use delayd_redis::RedisBroker;
use tokio::sync::Mutex;

const MESSAGES: usize = 400;

async fn consume(
    node: Arc<RedisBroker>,
    q: QueueName,
    seen: Arc<Mutex<Vec<MessageId>>>,
    deadline: Instant,
) {
    while Instant::now() < deadline && seen.lock().await.len() < MESSAGES {
        let request = LeaseRequest {
            max: 7,
            wait_ms: 200,
            lease_ms: Some(60_000),
        };
        let got = node.lease(std::slice::from_ref(&q), request).await.unwrap();
        for d in got {
            assert_eq!(d.attempt, 1, "{} delivered again", d.id);
            seen.lock().await.push(d.id.clone());
            node.ack(&q, &d.id, &d.lease_id).await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_never_deliver_one_message_twice() {
    let server = shared_single();
    let prefix = unique_prefix();
    let a = Arc::new(broker(vec![server.url()], 2, &prefix).await);
    let b = Arc::new(broker(vec![server.url()], 2, &prefix).await);
    let q = QueueName::new("race").unwrap();
    a.put_queue(&q, QueueConfigPatch::default()).await.unwrap();
    let batch: Vec<EnqueueRequest> = (0..MESSAGES)
        .map(|i| EnqueueRequest {
            id: Some(MessageId::new(format!("m{i}")).unwrap()),
            // Half ready now, half promoted by the nodes' timers meanwhile.
            schedule: if i.is_multiple_of(2) {
                Schedule::Now
            } else {
                Schedule::Delay(150)
            },
            payload: vec![b'x'; 16],
            ..Default::default()
        })
        .collect();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut consumers = Vec::new();
    for node in [&a, &b, &a, &b] {
        consumers.push(tokio::spawn(consume(
            node.clone(),
            q.clone(),
            seen.clone(),
            deadline,
        )));
    }
    for chunk in batch.chunks(100) {
        let results = b
            .enqueue(&q, chunk.to_vec(), EnqueueOptions::default())
            .await
            .unwrap();
        assert!(results.iter().all(|r| r.as_ref().is_ok_and(|o| o.created)));
    }
    for c in consumers {
        c.await.unwrap();
    }
    let seen = seen.lock().await;
    let unique: HashSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "a message was delivered twice");
    assert_eq!(seen.len(), MESSAGES, "not every message was delivered");
    let stats = a.get_queue(&q).await.unwrap().stats;
    assert_eq!((stats.scheduled, stats.ready, stats.leased), (0, 0, 0));
}

/// A node configured with another shard count than the deployment's would
/// look for messages on the wrong shards: it is refused at connect.
#[tokio::test]
async fn a_node_with_another_shard_count_is_refused() {
    let server = shared_single();
    let prefix = unique_prefix();
    let _first = broker(vec![server.url()], 2, &prefix).await;
    let other =
        delayd_redis::RedisBroker::connect(support::config(vec![server.url()], 3, &prefix)).await;
    assert!(
        matches!(other, Err(delayd_redis::RedisBrokerError::InvalidConfig(_))),
        "connect with 3 shards succeeded"
    );
    assert!(
        delayd_redis::RedisBroker::connect(support::config(vec![server.url()], 2, &prefix))
            .await
            .is_ok()
    );
}
