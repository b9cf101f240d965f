//! A pipelined segment whose commit fails (an fsync injected to fail through
//! `LocalConfig::faults`): its replies were held back behind the commit, so
//! the connection closes without them. A client sees a disconnect, never a
//! reply that claims a put a crash could take back, nor an error line in
//! place of a reply it was owed.

use std::sync::Arc;

use delayd_beanstalk::BeanstalkConfig;
use delayd_local::{FaultPlan, LocalBroker, LocalConfig};

use crate::common::{start_with, Client};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_commit_closes_the_connection_without_its_replies() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = LocalConfig::new(dir.path());
    config.faults = FaultPlan {
        fail_fsync: Some(6),
        ..FaultPlan::default()
    };
    let broker = LocalBroker::open(config).await.unwrap();
    let server = start_with(Arc::new(broker), BeanstalkConfig::default()).await;
    let mut client = Client::connect(server.addr).await;
    // The first put into a tube runs on its own; the next ones are
    // pipelined segments, one commit each.
    let mut inserted = 0;
    loop {
        client.send(b"put 0 0 60 1\r\nx\r\n").await;
        let line = client.line().await;
        if line.is_empty() {
            break;
        }
        assert!(
            line.starts_with("INSERTED "),
            "{line:?}: a put is answered INSERTED or not at all"
        );
        inserted += 1;
        assert!(
            inserted < 20,
            "the sixth fsync failed, yet the connection stayed open"
        );
    }
    assert!(inserted >= 1, "the first put's commit did not fail");
}
