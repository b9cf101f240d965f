//! Wall-clock jumps: a backwards jump does not fire a message before its
//! wall-clock `deliver_at`; a forwards jump fires what is now due promptly.

use std::sync::Arc;
use std::time::{Duration, Instant};

use delayd_core::{
    Broker, Clock, Delivery, EnqueueOptions, EnqueueRequest, LeaseRequest, QueueName, Schedule,
    SkewedClock,
};
use delayd_local::{LocalBroker, LocalConfig};

async fn open(clock: &SkewedClock) -> (tempfile::TempDir, LocalBroker) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = LocalConfig::new(dir.path());
    config.clock = Arc::new(clock.clone());
    (dir, LocalBroker::open(config).await.unwrap())
}

async fn enqueue(broker: &LocalBroker, queue: &QueueName, schedule: Schedule) -> u64 {
    let request = EnqueueRequest {
        schedule,
        payload: b"x".to_vec(),
        ..EnqueueRequest::default()
    };
    let out = broker
        .enqueue(queue, vec![request], EnqueueOptions::default())
        .await
        .unwrap();
    out[0].as_ref().unwrap().deliver_at
}

/// A lease of one message of `queue`, waiting up to `wait_ms`: what it got
/// and how long it took.
async fn lease_one(
    broker: &LocalBroker,
    queue: &QueueName,
    wait_ms: u64,
) -> (Vec<Delivery>, Duration) {
    let started = Instant::now();
    let request = LeaseRequest {
        max: 1,
        wait_ms,
        lease_ms: None,
    };
    let got = broker
        .lease(std::slice::from_ref(queue), request)
        .await
        .unwrap();
    (got, started.elapsed())
}

#[tokio::test]
async fn backwards_jump_does_not_fire_early() {
    const HOUR: i64 = 3_600_000;
    let clock = SkewedClock::new();
    let (_dir, broker) = open(&clock).await;
    let queue = QueueName::new("back").unwrap();
    let deliver_at = enqueue(&broker, &queue, Schedule::Delay(300)).await;
    clock.jump(-HOUR);
    // 300 ms of real time pass; by the (jumped) wall clock the message is
    // still an hour away, so it must not be delivered.
    let (got, _) = lease_one(&broker, &queue, 800).await;
    assert!(
        got.is_empty(),
        "delivered while wall time {} < deliver_at {deliver_at}",
        clock.now_ms()
    );
    // Jump back: it is due now by wall time and fires at once.
    clock.jump(HOUR);
    let (got, waited) = lease_one(&broker, &queue, 5_000).await;
    assert_eq!(got.len(), 1);
    assert!(
        clock.now_ms() >= deliver_at,
        "fired before its wall-clock deliver_at"
    );
    assert!(
        waited < Duration::from_secs(1),
        "slow after the clock came back: {waited:?}"
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn forwards_jump_fires_promptly() {
    let clock = SkewedClock::new();
    let (_dir, broker) = open(&clock).await;
    let queue = QueueName::new("fwd").unwrap();
    // Due in an hour: beyond the default 5-minute horizon too, so the jump
    // also has to move the horizon and load it from disk.
    let deliver_at = enqueue(&broker, &queue, Schedule::Delay(3_600_000)).await;
    assert_eq!(
        broker.messages_in_memory(),
        0,
        "a message an hour away stays on disk"
    );
    clock.jump(3_600_000 + 10);
    let (got, waited) = lease_one(&broker, &queue, 5_000).await;
    assert_eq!(got.len(), 1, "not delivered after the forward jump");
    assert!(clock.now_ms() >= deliver_at);
    assert!(waited < Duration::from_millis(1_000), "took {waited:?}");
    broker.shutdown().await.unwrap();
}
