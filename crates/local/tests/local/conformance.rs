//! The conformance suite (delayd-core's testkit) against LocalBroker, each
//! case on a fresh store in its own temporary directory, on virtual time:
//! the broker reads the case's clock and times its waits with tokio, so
//! timing cases advance time instead of sleeping.
//!
//! Durability `never`: with it no call waits for the sync thread (the one
//! wait that is not tokio's, during which paused time would jump ahead);
//! what `always` adds (a call returns after its group's fsync) is covered
//! by `durability_modes.rs` and the kill -9 tests.
//!
//! The schedule cases run here too (`conformance_tests_schedules!`), the
//! wall-clock ones (DST, catch-up after a jump) included, and those of
//! time settled at the call, with the driver held.

use std::sync::Arc;

use delayd_core::testkit::support::VirtualClock;
use delayd_core::Broker;
use delayd_local::{Durability, LocalBroker, LocalConfig};

/// A fresh broker on a fresh directory. The directory is leaked so it
/// outlives the broker (cleaned up with the test's temp files).
async fn fresh(clock: Arc<VirtualClock>) -> Arc<dyn Broker> {
    Arc::new(fresh_local(clock).await)
}

async fn fresh_local(clock: Arc<VirtualClock>) -> LocalBroker {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let path = dir.path().to_path_buf();
    std::mem::forget(dir);
    let mut config = LocalConfig::new(path);
    config.clock = clock;
    config.durability = Durability::Never;
    LocalBroker::open(config)
        .await
        .unwrap_or_else(|e| panic!("open: {e}"))
}

/// A fresh broker whose driver is held for the whole case: no timer fires
/// in the background, so each call must settle time itself.
async fn fresh_held(clock: Arc<VirtualClock>) -> Arc<dyn Broker> {
    let broker = fresh_local(clock).await;
    broker.hold_driver(true);
    Arc::new(broker)
}

delayd_core::conformance_tests!(virtual_time | clock | fresh(clock));
delayd_core::conformance_tests_extended!(virtual_time | clock | fresh(clock));
delayd_core::conformance_tests_schedules!(virtual_time | clock | fresh(clock));
delayd_core::conformance_tests_schedules_extended!(virtual_time | clock | fresh(clock));
delayd_core::conformance_tests_flow!(virtual_time | clock | fresh(clock));
delayd_core::conformance_tests_time_at_call!(virtual_time | clock | fresh_held(clock));
delayd_core::conformance_tests_retention!(virtual_time | clock | fresh(clock));
delayd_core::conformance_tests_history!(virtual_time | clock | fresh(clock));
delayd_core::conformance_tests_history_extended!(virtual_time | clock | fresh(clock));
delayd_core::conformance_tests_replace!(virtual_time | clock | fresh(clock));
