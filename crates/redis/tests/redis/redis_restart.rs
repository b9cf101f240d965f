//! Redis (AOF, `appendfsync always`) is killed and restarted under a running
//! broker: calls fail `Unavailable` while it is down, work again afterwards
//! without restarting the broker, and nothing Redis acknowledged is lost.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::support::{broker, unique_prefix, RedisServer};
use delayd_core::{
    Broker, BrokerError, EnqueueOptions, EnqueueRequest, LeaseRequest, MessageId, QueueName,
    Schedule,
};

fn request(i: usize) -> EnqueueRequest {
    EnqueueRequest {
        id: Some(MessageId::new(format!("m{i}")).unwrap()),
        schedule: if i.is_multiple_of(3) {
            Schedule::Delay(500)
        } else {
            Schedule::Now
        },
        payload: format!("payload {i}").into_bytes(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_is_survived_without_restarting_the_broker() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let node = broker(vec![server.url()], 2, &unique_prefix()).await;
    let q = QueueName::new("durable").unwrap();
    let batch: Vec<_> = (0..60).map(request).collect();
    let results = node
        .enqueue(&q, batch, EnqueueOptions::default())
        .await
        .unwrap();
    let last_seq = results
        .iter()
        .map(|r| r.as_ref().unwrap().seq)
        .max()
        .unwrap();
    let leased = node
        .lease(
            std::slice::from_ref(&q),
            LeaseRequest {
                max: 5,
                wait_ms: 0,
                lease_ms: Some(60_000),
            },
        )
        .await
        .unwrap();
    assert_eq!(leased.len(), 5);

    server.kill();
    let down = node.get(&q, &MessageId::new("m1").unwrap()).await;
    assert!(
        matches!(down, Err(BrokerError::Unavailable { .. })),
        "{down:?}"
    );
    let down = node
        .enqueue(&q, vec![request(999)], EnqueueOptions::default())
        .await;
    assert!(
        matches!(down, Err(BrokerError::Unavailable { .. })),
        "{down:?}"
    );
    assert!(node.ready().await.is_err());

    server.restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    while node.ready().await.is_err() {
        assert!(Instant::now() < deadline, "broker never reconnected");
        // Polls: the broker's reconnection has no event this test can await.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Everything acknowledged before the crash is there, leases included.
    let stats = node.get_queue(&q).await.unwrap().stats;
    assert_eq!(
        stats.scheduled + stats.ready + stats.leased,
        60,
        "{stats:?}"
    );
    assert_eq!(stats.leased, 5);
    for d in &leased {
        node.ack(&q, &d.id, &d.lease_id).await.unwrap();
    }
    // Seqs keep increasing across the restart (the counter is persisted).
    let after = node
        .enqueue(&q, vec![request(1000)], EnqueueOptions::default())
        .await
        .unwrap();
    assert!(after[0].as_ref().unwrap().seq > last_seq);

    // The rest is delivered exactly once.
    let mut delivered: HashSet<MessageId> = leased.iter().map(|d| d.id.clone()).collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while delivered.len() < 61 && Instant::now() < deadline {
        let got = node
            .lease(
                std::slice::from_ref(&q),
                LeaseRequest {
                    max: 20,
                    wait_ms: 1_000,
                    lease_ms: None,
                },
            )
            .await
            .unwrap();
        for d in got {
            assert!(delivered.insert(d.id.clone()), "{} twice", d.id);
            node.ack(&q, &d.id, &d.lease_id).await.unwrap();
        }
    }
    assert_eq!(delivered.len(), 61);
}
