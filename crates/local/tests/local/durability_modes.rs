//! Every durability mode keeps what was acknowledged across a clean
//! shutdown (shutdown makes everything durable), and `Always` fsyncs at
//! least once per acknowledged call group while `Never` never waits.

use std::time::Duration;

use delayd_core::{Broker, EnqueueOptions, EnqueueRequest, MessageId, QueueName};
use delayd_local::{Durability, LocalBroker, LocalConfig};

async fn round_trip(durability: Durability) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let queue = QueueName::new("modes").unwrap();
    let mut config = LocalConfig::new(dir.path());
    config.durability = durability;
    let broker = LocalBroker::open(config.clone()).await.unwrap();
    for i in 0..20 {
        let request = EnqueueRequest {
            id: Some(MessageId::new(format!("m{i}")).unwrap()),
            payload: vec![1; 10],
            ..EnqueueRequest::default()
        };
        broker
            .enqueue(&queue, vec![request], EnqueueOptions::default())
            .await
            .unwrap();
    }
    let stats = broker.store_stats();
    broker.shutdown().await.unwrap();
    drop(broker);
    let broker = LocalBroker::open(config).await.unwrap();
    for i in 0..20 {
        let id = MessageId::new(format!("m{i}")).unwrap();
        assert!(
            broker.get(&queue, &id).await.is_ok(),
            "{durability:?}: m{i} lost"
        );
    }
    broker.shutdown().await.unwrap();
    (stats.commits, stats.fsyncs)
}

#[tokio::test]
async fn always_fsyncs_every_sequential_call() {
    let (commits, fsyncs) = round_trip(Durability::Always).await;
    // 20 sequential calls, each waiting for its own fsync (plus the queue
    // creation riding on the first).
    assert!(commits >= 20, "commits {commits}");
    assert!(
        fsyncs >= 20,
        "each sequential call needs its fsync: {fsyncs}"
    );
}

#[tokio::test]
async fn interval_and_never_keep_data_across_clean_shutdown() {
    round_trip(Durability::Interval(Duration::from_millis(50))).await;
    round_trip(Durability::Never).await;
}
