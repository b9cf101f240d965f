//! The pub/sub subscriptions of every node are killed (`CLIENT KILL TYPE
//! pubsub`): deliveries from one node to a consumer waiting on another still
//! arrive on time (the subscription comes back; the sweep covers the gap).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{broker, unique_prefix, RedisServer};
use delayd_core::{
    Broker, Clock, EnqueueOptions, EnqueueRequest, LeaseRequest, QueueName, Schedule, SystemClock,
};

async fn wait_for_subscribers(server: &RedisServer, channel: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = server.cli(&["pubsub", "numsub", channel]);
        let count: usize = out
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or(0);
        if count >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "subscribers never reached {n}: {out}"
        );
        // Polls: Redis's subscriber count has no event this test can await.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_stays_on_time_when_subscriptions_are_killed() {
    // Its own server: it kills every pub/sub client on it.
    let server = RedisServer::start();
    let prefix = unique_prefix();
    let producer = broker(vec![server.url()], 1, &prefix).await;
    let consumer = Arc::new(broker(vec![server.url()], 1, &prefix).await);
    let channel = format!("{prefix}:events");
    let q = QueueName::new("orders").unwrap();
    producer.put_queue(&q, Default::default()).await.unwrap();

    for round in 0..3 {
        wait_for_subscribers(&server, &channel, 2).await;
        let killed = server.cli(&["client", "kill", "type", "pubsub"]);
        assert!(
            killed.trim().parse::<u32>().unwrap_or(0) >= 2,
            "round {round}: killed {killed:?}"
        );
        let waiting = tokio::spawn({
            let (consumer, q) = (consumer.clone(), q.clone());
            async move {
                let request = LeaseRequest {
                    max: 1,
                    wait_ms: 5_000,
                    lease_ms: None,
                };
                let got = consumer.lease(&[q], request).await.unwrap();
                (got, SystemClock.now_ms())
            }
        });
        let request = EnqueueRequest {
            schedule: Schedule::Delay(300),
            payload: format!("m{round}").into_bytes(),
            ..Default::default()
        };
        let out = producer
            .enqueue(&q, vec![request], EnqueueOptions::default())
            .await
            .unwrap()
            .remove(0)
            .unwrap();
        let (got, fired_at) = waiting.await.unwrap();
        assert_eq!(got.len(), 1, "round {round}: nothing delivered");
        assert_eq!(got[0].id, out.id);
        assert!(fired_at >= out.deliver_at, "round {round}: early");
        let late = fired_at - out.deliver_at;
        // Bounded by the sweep interval (500 ms) plus scheduling slack.
        assert!(late < 1_200, "round {round}: {late} ms late");
        consumer
            .ack(&q, &got[0].id, &got[0].lease_id)
            .await
            .unwrap();
    }
}
