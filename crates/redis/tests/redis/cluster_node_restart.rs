//! A Redis Cluster master (AOF, `appendfsync always`) is killed and
//! restarted under a running broker: calls on its slots fail `Unavailable`
//! while it is down, and everything works again once it is back, without
//! restarting the broker and without losing what it had acknowledged.

use std::time::{Duration, Instant};

use crate::support::{broker, unique_prefix, RedisCluster};
use delayd_core::{Broker, BrokerError, EnqueueOptions, EnqueueRequest, QueueName};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_master_restart_is_survived() {
    let mut cluster = RedisCluster::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let node = broker(cluster.urls(), 2, &unique_prefix()).await;
    // Enough queues that some shards live on every master.
    let queues: Vec<QueueName> = (0..12)
        .map(|i| QueueName::new(format!("q{i}")).unwrap())
        .collect();
    for q in &queues {
        let batch = vec![EnqueueRequest::default(); 5];
        node.enqueue(q, batch, EnqueueOptions::default())
            .await
            .unwrap();
    }

    cluster.nodes[0].kill();
    let mut failed = false;
    for q in &queues {
        match node.get_queue(q).await {
            Err(BrokerError::Unavailable { .. }) => {
                failed = true;
                break;
            }
            Err(e) => panic!("unexpected error {e:?}"),
            Ok(_) => {}
        }
    }
    assert!(failed, "no call touched the dead master");

    cluster.nodes[0].restart();
    assert!(
        cluster.wait_ok(Duration::from_secs(30)),
        "cluster never recovered"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    for q in &queues {
        let stats = loop {
            match node.get_queue(q).await {
                Ok(info) => break info.stats,
                Err(e) => {
                    assert!(Instant::now() < deadline, "{q} still failing: {e:?}");
                    // Polls: a restarted cluster node has no event this test can await.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        assert_eq!(stats.ready, 5, "{q}: {stats:?}");
    }
}
