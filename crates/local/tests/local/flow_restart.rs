//! A restart grants no burst beyond `burst` (issue 29, "Bad input and
//! failures"): a queue's rate bucket spent just before a restart must not
//! come back full after it. LocalBroker starts the buckets of a recovered
//! queue empty at the restart, so over any span across the restart the
//! deliveries stay within `burst + floor(span * limit / period)`.
//!
//! On virtual time (the broker's clock and tokio's paused together), so the
//! token arithmetic is exact.

use std::sync::Arc;
use std::time::Duration;

use delayd_core::testkit::support as s;
use delayd_core::{
    Broker, EnqueueOptions, EnqueueRequest, FlowConfig, LeaseRequest, QueueConfigPatch, QueueName,
    Rate, Schedule,
};

const BURST: u32 = 5;
/// 10 per second: one token every 100 ms.
const RATE: Rate = Rate {
    limit: 10,
    period_ms: 1_000,
    burst: BURST,
};

use crate::support::open_virtual as open;

/// Leases what the gate lets through now (no wait) and acks it.
async fn take_all(b: &Arc<dyn Broker>, q: &QueueName) -> usize {
    let request = LeaseRequest {
        max: 100,
        wait_ms: 0,
        lease_ms: None,
    };
    let got = s::must(b.lease(std::slice::from_ref(q), request).await, "lease");
    for d in &got {
        s::must(b.ack(q, &d.id, &d.lease_id).await, "ack");
    }
    got.len()
}

#[test]
fn a_restart_does_not_refill_the_bucket() {
    s::run_case_virtual_within(Duration::from_secs(600), |clock| async move {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let b = open(dir.path(), clock.clone()).await;
        let q = s::queue("flow_restart", "q");
        let patch = QueueConfigPatch {
            flow: Some(Some(FlowConfig {
                rate: Some(RATE),
                ..FlowConfig::default()
            })),
            ..QueueConfigPatch::default()
        };
        s::must(b.put_queue(&q, patch).await, "put_queue");
        let requests: Vec<EnqueueRequest> = (0..50)
            .map(|i| s::req(None, Schedule::Now, &format!("m{i}")))
            .collect();
        let results = s::must(
            b.enqueue(&q, requests, EnqueueOptions::default()).await,
            "enqueue",
        );
        assert!(results.iter().all(Result::is_ok));

        // A new store's bucket starts full: the burst, and not one more.
        // (`Durability::Never`: no call waits on the sync thread, so the
        // paused clock does not move unless the test moves it.)
        assert_eq!(
            take_all(&b, &q).await,
            BURST as usize,
            "a new queue's burst"
        );
        assert_eq!(take_all(&b, &q).await, 0, "the burst is spent");

        // Restart at once (no time passes, no token is earned).
        s::must(b.shutdown().await, "shutdown");
        drop(b);
        let b = open(dir.path(), clock.clone()).await;
        assert_eq!(
            take_all(&b, &q).await,
            0,
            "a restart right after the burst was spent must not grant another"
        );

        // Tokens come back at the rate from the restart on: one per 100 ms.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            take_all(&b, &q).await,
            1,
            "one token 100 ms after the restart"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(take_all(&b, &q).await, 3, "three more 300 ms later");

        // After a long pause the bucket is full again, at `burst`.
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            take_all(&b, &q).await,
            BURST as usize,
            "full again, at burst"
        );
        s::must(b.shutdown().await, "shutdown");
    });
}
