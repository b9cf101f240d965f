//! The schedule, flow, retention, history and replace cases on virtual time
//! (tokio's clock paused, the broker reading the case's `VirtualClock`),
//! including the ones that move the wall clock (DST transitions, catch-up
//! after a jump), against a single Redis.

use std::sync::Arc;

use crate::support::{shared_single, unique_prefix};
use delayd_core::testkit::support::VirtualClock;
use delayd_core::Broker;
use delayd_redis::{RedisBroker, RedisConfig};

/// A broker on the shared Redis under a fresh prefix, reading `clock`.
async fn fresh(clock: Arc<VirtualClock>) -> Arc<dyn Broker> {
    let config = RedisConfig {
        urls: vec![shared_single().url()],
        shards: 1,
        key_prefix: unique_prefix(),
        clock,
        tls_ca: None,
        virtual_time: true,
        wait_replicas: None,
    };
    Arc::new(RedisBroker::connect(config).await.expect("connect"))
}

delayd_core::conformance_tests_schedules!(virtual_time | clock | fresh(clock));

delayd_core::conformance_tests_flow!(virtual_time | clock | fresh(clock));

delayd_core::conformance_tests_retention!(virtual_time | clock | fresh(clock));

delayd_core::conformance_tests_history!(virtual_time | clock | fresh(clock));
delayd_core::conformance_tests_history_extended!(virtual_time | clock | fresh(clock));

delayd_core::conformance_tests_replace!(virtual_time | clock | fresh(clock));
