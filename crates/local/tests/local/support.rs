//! What several of these tests share.

use std::path::Path;
use std::sync::Arc;

use delayd_core::testkit::support::VirtualClock;
use delayd_core::Broker;
use delayd_local::{Durability, LocalBroker, LocalConfig};

/// A broker on `path` reading `clock`, durability `never` (no call waits
/// on the sync thread, so paused tokio time moves only with the test).
pub async fn open_virtual(path: &Path, clock: Arc<VirtualClock>) -> Arc<dyn Broker> {
    let mut config = LocalConfig::new(path);
    config.clock = clock;
    config.durability = Durability::Never;
    Arc::new(
        LocalBroker::open(config)
            .await
            .unwrap_or_else(|e| panic!("open: {e}")),
    )
}
