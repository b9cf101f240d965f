//! The conformance suite (delayd-core's testkit) against LocalBroker, each
//! case on a fresh store in its own temporary directory.

use std::sync::Arc;

use delayd_core::Broker;
use delayd_local::{LocalBroker, LocalConfig};

/// A fresh broker on a fresh directory. The directory is leaked so it
/// outlives the broker (cleaned up with the test's temp files).
async fn fresh() -> Arc<dyn Broker> {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let path = dir.path().to_path_buf();
    std::mem::forget(dir);
    let broker = LocalBroker::open(LocalConfig::new(path))
        .await
        .unwrap_or_else(|e| panic!("open: {e}"));
    Arc::new(broker)
}

delayd_core::conformance_tests!(fresh());
delayd_core::conformance_tests_extended!(fresh());
