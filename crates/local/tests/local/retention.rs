//! Retention on the embedded store beyond the conformance cases: retained
//! messages survive a restart (an id stays a duplicate), and the sweeper
//! that reclaims expired records never takes a later record of the same
//! id. On virtual time (the broker's clock and tokio's paused together).

use std::sync::Arc;
use std::time::Duration;

use delayd_core::testkit::support as s;
use delayd_core::{Broker, MessageState, QueueConfigPatch, QueueName};

use crate::support::open_virtual as open;

async fn retaining(b: &Arc<dyn Broker>, retain_ms: u64) -> QueueName {
    let q = s::queue("local_retention", "q");
    let patch = QueueConfigPatch {
        retain_ms: Some(retain_ms),
        ..QueueConfigPatch::default()
    };
    s::must(b.put_queue(&q, patch).await, "put_queue");
    q
}

async fn ack_one(b: &Arc<dyn Broker>, q: &QueueName, id: &str) -> u64 {
    let out = s::put_now(b, q, id).await;
    let d = s::lease_one(b, q, None).await;
    assert_eq!(d.id.as_str(), id);
    s::must(b.ack(q, &d.id, &d.lease_id).await, "ack");
    out.seq
}

#[test]
fn retained_ids_survive_a_restart() {
    s::run_case_virtual_within(Duration::from_secs(600), |clock| async move {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let b = open(dir.path(), clock.clone()).await;
        let q = retaining(&b, 3_600_000).await;
        let acked = ack_one(&b, &q, "acked").await;
        let cancelled = s::put_now(&b, &q, "cancelled").await;
        s::must(b.cancel(&q, &cancelled.id).await, "cancel");
        s::must(b.shutdown().await, "shutdown");
        drop(b);

        let b = open(dir.path(), clock.clone()).await;
        let m = s::get(&b, &q, &s::id("acked")).await;
        assert_eq!((m.state, m.seq), (MessageState::Acked, acked));
        let again = s::put_now(&b, &q, "acked").await;
        assert!(
            !again.created,
            "a retained id stays a duplicate after a restart"
        );
        assert_eq!(again.seq, acked);
        let c = s::get(&b, &q, &cancelled.id).await;
        assert_eq!(c.state, MessageState::Cancelled);
        let stats = s::must(b.get_queue(&q).await, "get_queue").stats;
        assert_eq!(
            (stats.ready, stats.scheduled),
            (0, 0),
            "not counted after a restart"
        );

        // An hour later (the broker was down meanwhile) the ids are free.
        clock.jump(3_600_001);
        s::assert_not_found(b.get(&q, &s::id("acked")).await, "after the window");
        assert!(s::put_now(&b, &q, "acked").await.created);
        s::must(b.shutdown().await, "shutdown");
    });
}

/// An id acked, expired, enqueued and acked again before the sweeper got
/// to the first record: the sweep of the first record's expiry leaves the
/// second record alone.
#[test]
fn the_sweeper_keeps_a_later_record_of_the_same_id() {
    s::run_case_virtual_within(Duration::from_secs(600), |clock| async move {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let b = open(dir.path(), clock.clone()).await;
        let q = retaining(&b, 1_500).await;
        let first = ack_one(&b, &q, "x").await;
        // Past the first window: the id is free, whether swept or not.
        tokio::time::sleep(Duration::from_millis(1_600)).await;
        let second = ack_one(&b, &q, "x").await;
        assert!(second > first);
        // Sweeps run every second: several pass while the second is kept.
        tokio::time::sleep(Duration::from_millis(1_400)).await;
        let m = s::get(&b, &q, &s::id("x")).await;
        assert_eq!((m.state, m.seq), (MessageState::Acked, second));
        s::must(b.shutdown().await, "shutdown");
        drop(b);
        // And after a restart (the sweep's deletes were written).
        let b = open(dir.path(), clock.clone()).await;
        let m = s::get(&b, &q, &s::id("x")).await;
        assert_eq!(m.seq, second, "the later record survived the sweep");
        s::must(b.shutdown().await, "shutdown");
    });
}
