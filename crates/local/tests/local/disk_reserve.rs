//! Below the disk reserve, calls that add data (enqueue, pipelined puts)
//! are refused with `InsufficientStorage` naming the cause, while calls
//! that remove data (ack, cancel, delete a queue) go on; when space
//! returns, enqueues resume without a restart. Space is simulated with the
//! reserve (a reserve larger than any disk); tmpfs_disk_full in the CLI's
//! tests fills a real filesystem.

use std::collections::VecDeque;
use std::time::Duration;

use delayd_core::{
    Broker, BrokerError, EnqueueOptions, EnqueueRequest, LeaseRequest, PipelinedCall,
    PipelinedResult, QueueName,
};
use delayd_local::{LocalBroker, LocalConfig};

fn queue() -> QueueName {
    QueueName::new("jobs").expect("valid queue name")
}

fn request() -> EnqueueRequest {
    EnqueueRequest {
        payload: b"x".to_vec(),
        ..EnqueueRequest::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_the_reserve_enqueues_are_refused_and_removals_work() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = LocalConfig::new(dir.path());
    config.disk_reserve = 0;
    let broker = LocalBroker::open(config.clone()).await.expect("open");
    let requests = (0..3).map(|_| request()).collect();
    broker
        .enqueue(&queue(), requests, EnqueueOptions::default())
        .await
        .expect("enqueue");
    broker.shutdown().await.expect("shutdown");
    drop(broker);

    // No filesystem has u64::MAX bytes free.
    config.disk_reserve = u64::MAX;
    let broker = LocalBroker::open(config).await.expect("open");
    let refused = broker
        .enqueue(&queue(), vec![request()], EnqueueOptions::default())
        .await;
    match refused {
        Err(BrokerError::InsufficientStorage(text)) => {
            assert!(text.contains("below the reserve"), "{text}");
        }
        other => panic!("expected InsufficientStorage, got {other:?}"),
    }
    let wait = LeaseRequest {
        max: 2,
        wait_ms: 0,
        lease_ms: None,
    };
    let leased = broker.lease(&[queue()], wait).await.expect("lease");
    assert_eq!(leased.len(), 2);
    broker
        .ack(&queue(), &leased[0].id, &leased[0].lease_id)
        .await
        .expect("acks work below the reserve");
    broker
        .cancel(&queue(), &leased[1].id)
        .await
        .expect("cancels work below the reserve");
    assert!(
        broker.ready().await.is_ok(),
        "readyz stays up so consumers drain"
    );

    let mut calls = VecDeque::from([PipelinedCall::Enqueue {
        queue: queue(),
        messages: vec![request()],
        options: EnqueueOptions::default(),
    }]);
    let results = broker.pipeline(&mut calls).await;
    assert!(matches!(
        results.as_slice(),
        [PipelinedResult::Enqueued(Err(
            BrokerError::InsufficientStorage(_)
        ))]
    ));
    broker
        .delete_queue(&queue())
        .await
        .expect("delete works below the reserve");
    broker.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserve_of_zero_never_refuses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = LocalConfig::new(dir.path());
    config.disk_reserve = 0;
    let broker = LocalBroker::open(config).await.expect("open");
    // Kept: lets the disk guard's background check run before the enqueue (it has no hook); a zero reserve must not refuse either way.
    tokio::time::sleep(Duration::from_millis(150)).await;
    broker
        .enqueue(&queue(), vec![request()], EnqueueOptions::default())
        .await
        .expect("enqueue");
    broker.shutdown().await.expect("shutdown");
}
