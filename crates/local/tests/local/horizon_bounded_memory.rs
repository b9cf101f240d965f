//! Bounded memory: far-future messages are not held in memory, neither
//! after enqueue nor after a restart, and are counted as on disk.

use delayd_core::{Broker, EnqueueOptions, EnqueueRequest, QueueName, Schedule};
use delayd_local::{LocalBroker, LocalConfig};

const DAY_MS: u64 = 86_400_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn far_future_messages_stay_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let queue = QueueName::new("future").unwrap();
    let broker = LocalBroker::open(LocalConfig::new(dir.path()))
        .await
        .unwrap();
    // 10k messages spread over 30 days, in batches (one commit each), and
    // 5 due now.
    for batch in 0..10u64 {
        let requests = (0..1_000u64)
            .map(|i| EnqueueRequest {
                schedule: Schedule::Delay(DAY_MS + (batch * 1_000 + i) * (29 * DAY_MS / 10_000)),
                payload: vec![7; 100],
                ..EnqueueRequest::default()
            })
            .collect();
        broker
            .enqueue(&queue, requests, EnqueueOptions::default())
            .await
            .unwrap();
    }
    let now: Vec<_> = (0..5).map(|_| EnqueueRequest::default()).collect();
    broker
        .enqueue(&queue, now, EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!(
        broker.messages_in_memory(),
        5,
        "only the due messages are in memory"
    );
    let stats = broker.get_queue(&queue).await.unwrap().stats;
    assert_eq!((stats.scheduled, stats.ready), (10_000, 5));
    broker.shutdown().await.unwrap();
    drop(broker);

    let broker = LocalBroker::open(LocalConfig::new(dir.path()))
        .await
        .unwrap();
    let report = broker.recovery_report().clone();
    assert_eq!(report.messages_on_disk, 10_005, "{report:?}");
    assert_eq!(
        report.messages_in_memory, 5,
        "far-future messages loaded at open: {report:?}"
    );
    assert_eq!(broker.messages_in_memory(), 5);
    let stats = broker.get_queue(&queue).await.unwrap().stats;
    assert_eq!((stats.scheduled, stats.ready), (10_000, 5));
    broker.shutdown().await.unwrap();
}

/// An enqueue looks a new id up on disk only while some message of the
/// queue lives on disk only (`QueueState::all_in_memory`): a repeated id
/// of a far-future message is still found, before and after the queue's
/// in-memory messages come and go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_id_of_a_disk_only_message_is_found() {
    use delayd_core::MessageId;
    let dir = tempfile::tempdir().unwrap();
    let queue = QueueName::new("repeat").unwrap();
    let broker = LocalBroker::open(LocalConfig::new(dir.path()))
        .await
        .unwrap();
    let put = |id: &str, delay: u64| EnqueueRequest {
        id: Some(MessageId::new(id).unwrap()),
        schedule: Schedule::Delay(delay),
        ..EnqueueRequest::default()
    };
    let far = broker
        .enqueue(&queue, vec![put("far", DAY_MS)], EnqueueOptions::default())
        .await
        .unwrap()
        .remove(0)
        .unwrap();
    assert!(far.created);
    broker
        .enqueue(&queue, vec![put("near", 0)], EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!(broker.messages_in_memory(), 1, "far is on disk only");
    for round in 0..2 {
        let again = broker
            .enqueue(&queue, vec![put("far", 0)], EnqueueOptions::default())
            .await
            .unwrap()
            .remove(0)
            .unwrap();
        assert!(!again.created, "round {round}: far enqueued twice");
        assert_eq!(again.seq, far.seq);
        // A new id is still new.
        let fresh = broker
            .enqueue(
                &queue,
                vec![put(&format!("new{round}"), 0)],
                EnqueueOptions::default(),
            )
            .await
            .unwrap()
            .remove(0)
            .unwrap();
        assert!(fresh.created);
    }
    broker.shutdown().await.unwrap();
}
