//! The conformance suite against a single Redis, one shard per queue.

use std::sync::Arc;

use crate::support::{broker, shared_single, unique_prefix};

async fn fresh() -> Arc<dyn delayd_core::Broker> {
    let server = shared_single();
    Arc::new(broker(vec![server.url()], 1, &unique_prefix()).await)
}

/// A fresh broker whose timer and sweep tasks are held for the whole case:
/// only the calls themselves apply time.
async fn fresh_held() -> Arc<dyn delayd_core::Broker> {
    let server = shared_single();
    let broker = broker(vec![server.url()], 1, &unique_prefix()).await;
    broker.hold_timers(true);
    Arc::new(broker)
}

delayd_core::conformance_tests!(fresh());
delayd_core::conformance_tests_extended!(fresh());
delayd_core::conformance_tests_schedules!(fresh());
delayd_core::conformance_tests_schedules_extended!(fresh());
delayd_core::conformance_tests_flow!(fresh());
delayd_core::conformance_tests_time_at_call!(fresh_held());
delayd_core::conformance_tests_retention!(fresh());
delayd_core::conformance_tests_history!(fresh());
delayd_core::conformance_tests_history_extended!(fresh());
delayd_core::conformance_tests_replace!(fresh());
