//! Message history on the embedded store beyond the conformance cases:
//! a history survives a restart (it is on disk, written with each
//! transition), and `LocalConfig::history` off writes none.

use std::sync::Arc;
use std::time::Duration;

use delayd_core::testkit::support::{self as s, VirtualClock};
use delayd_core::{Broker, EventKind};
use delayd_local::{Durability, LocalBroker, LocalConfig};

async fn open(path: &std::path::Path, clock: Arc<VirtualClock>, history: bool) -> Arc<dyn Broker> {
    let mut config = LocalConfig::new(path);
    config.clock = clock;
    config.durability = Durability::Never;
    config.history = history;
    Arc::new(
        LocalBroker::open(config)
            .await
            .unwrap_or_else(|e| panic!("open: {e}")),
    )
}

#[test]
fn a_history_survives_a_restart() {
    s::run_case_virtual_within(Duration::from_secs(600), |clock| async move {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let b = open(dir.path(), clock.clone(), true).await;
        let q = s::queue("history_restart", "q");
        let m = s::put_now(&b, &q, "m").await;
        let d = s::lease_one(&b, &q, None).await;
        let before = s::must(b.events(&q, &m.id).await, "events");
        s::must(b.shutdown().await, "shutdown");
        drop(b);
        let b = open(dir.path(), clock.clone(), true).await;
        let after = s::must(b.events(&q, &m.id).await, "events");
        // The lease held at the stop came back as an expired one.
        assert_eq!(after.events[..2], before.events[..], "{after:?}");
        let last = after.events.last().map(|e| e.kind.clone());
        assert_eq!(last, Some(EventKind::Expired), "{after:?}");
        assert!(after.events.len() == 3 && d.attempt == 1);
        s::must(b.shutdown().await, "shutdown");
    });
}

#[test]
fn history_off_writes_none() {
    s::run_case_virtual_within(Duration::from_secs(600), |clock| async move {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let b = open(dir.path(), clock, false).await;
        let q = s::queue("history_off", "q");
        let m = s::put_now(&b, &q, "m").await;
        let d = s::lease_one(&b, &q, None).await;
        s::must(b.ack(&q, &d.id, &d.lease_id).await, "ack");
        let n = s::put_now(&b, &q, "n").await;
        let h = s::must(b.events(&q, &n.id).await, "events");
        assert!(h.events.is_empty() && h.dropped == 0, "{h:?}");
        s::assert_not_found(b.events(&q, &m.id).await, "an ended message");
        s::must(b.shutdown().await, "shutdown");
    });
}
