//! The conformance suite against a 3-master Redis Cluster, with every queue
//! spread over 3 shards (so leases merge across shards and slots).

use std::sync::Arc;

use crate::support::{broker, shared_cluster, unique_prefix};

async fn fresh() -> Arc<dyn delayd_core::Broker> {
    let cluster = shared_cluster();
    Arc::new(broker(cluster.urls(), 3, &unique_prefix()).await)
}

async fn fresh_held() -> Arc<dyn delayd_core::Broker> {
    let cluster = shared_cluster();
    let broker = broker(cluster.urls(), 3, &unique_prefix()).await;
    broker.hold_timers(true);
    Arc::new(broker)
}

delayd_core::conformance_tests!(fresh());
delayd_core::conformance_tests_extended!(fresh());
delayd_core::conformance_tests_schedules!(fresh());
delayd_core::conformance_tests_schedules_extended!(fresh());
delayd_core::conformance_tests_time_at_call!(fresh_held());
delayd_core::conformance_tests_retention!(fresh());

/// Flow control keeps a queue's limits and counts under one hash tag, so it
/// needs one shard per queue (docs/redis.md, "Flow control"); its queues
/// still spread over the Cluster's masters by name.
async fn fresh_one_shard() -> Arc<dyn delayd_core::Broker> {
    let cluster = shared_cluster();
    Arc::new(broker(cluster.urls(), 1, &unique_prefix()).await)
}

delayd_core::conformance_tests_flow!(fresh_one_shard());
// The history cases defer (flow) too; the ones that do not also run on 3
// shards (`history_three_shards`), where leases merge across shards.
delayd_core::conformance_tests_history!(fresh_one_shard());
delayd_core::conformance_tests_history_extended!(fresh_one_shard());
// Replace and debounce defer (flow) in one case: one shard per queue too.
delayd_core::conformance_tests_replace!(fresh_one_shard());

mod history_three_shards {
    use super::fresh;

    delayd_core::__conformance_cases!(fresh(); history_of_a_life, history_keeps_the_last_32);
}

/// One URL of a Cluster node is enough: the broker sees `cluster_enabled`
/// and uses a Cluster connection (a plain one would get MOVED errors).
#[tokio::test]
async fn one_cluster_url_is_detected_as_a_cluster() {
    use delayd_core::{Broker, EnqueueOptions, EnqueueRequest, QueueName};
    let cluster = shared_cluster();
    let node = broker(vec![cluster.urls()[0].clone()], 4, &unique_prefix()).await;
    // Queue names and shards spread these over all three masters' slots.
    for i in 0..12 {
        let q = QueueName::new(format!("spread{i}")).unwrap();
        let out = node
            .enqueue(
                &q,
                vec![EnqueueRequest::default()],
                EnqueueOptions::default(),
            )
            .await
            .unwrap();
        assert!(out[0].is_ok(), "{out:?}");
        assert_eq!(node.get_queue(&q).await.unwrap().stats.ready, 1);
    }
}
