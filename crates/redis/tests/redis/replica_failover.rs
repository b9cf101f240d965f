//! A Redis primary with one replica is failed over under load: the replica
//! is promoted (`REPLICAOF NO ONE`) after the primary is killed (-9), and
//! delayd is repointed at it (a new `RedisBroker` on the replica's address:
//! a broker keeps the address it connected to, so the operator restarts
//! the nodes with the new `--store`, or points a stable name at the new
//! primary). The clients' own records are then compared with what the
//! promoted replica holds.
//!
//! The replication link runs through a proxy in this test, so the window
//! that asynchronous replication can lose (written on the primary, not yet
//! on the replica) is made deterministic: phase 1 runs with the link up
//! and ends with the replica caught up; then the link stalls, phase 2 runs,
//! and the primary dies with phase 2 never replicated.
//!
//! What delayd promises, which the tests assert:
//! - asynchronous replication (`wait_replicas: None`, Redis's default):
//!   every call acknowledged after the replica's last received write is
//!   lost on failover: enqueues vanish, acks are undone (the message is
//!   delivered again), fired schedule times fire again, seqs are reused.
//!   Anything the replica had received survives.
//! - `min-replicas-to-write 1` + `min-replicas-max-lag`: the primary refuses
//!   writes once the replica lags more than the max lag, so the loss is
//!   bounded by that window but not zero.
//! - `wait_replicas: Some(1 replica)`: a call is acknowledged only after
//!   the replica confirmed it, so nothing acknowledged is lost; during the
//!   stall calls fail `Unavailable` (`maybe_applied`) instead.

use std::time::Duration;

use crate::failover::{run_failover, Mode};
use delayd_redis::ReplicaWait;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_replication_loses_what_the_replica_had_not_received() {
    let report = run_failover(Mode::Async).await;
    println!("async replication: {report:#?}");
    // Everything of phase 1 (replicated before the stall) survived.
    assert_eq!(report.phase1_anomalies, 0, "{report:#?}");
    // Everything acknowledged in phase 2 is gone, exactly (and there was
    // something of each kind to lose).
    assert!(report.phase2_enqueued_unacked > 0, "{report:#?}");
    assert!(report.phase2_acks_of_phase1 > 0, "{report:#?}");
    assert_eq!(
        report.lost_enqueues, report.phase2_enqueued_unacked,
        "{report:#?}"
    );
    assert_eq!(
        report.undone_acks, report.phase2_acks_of_phase1,
        "{report:#?}"
    );
    assert!(report.refired > 0, "{report:#?}");
    assert!(report.seq_reused, "{report:#?}");
    assert_eq!(report.missing_fires, 0, "{report:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_to_write_bounds_the_loss_to_the_max_lag() {
    let report = run_failover(Mode::MinReplicas).await;
    println!("min-replicas-to-write 1, max lag 1 s: {report:#?}");
    assert_eq!(report.phase1_anomalies, 0, "{report:#?}");
    // Writes within the lag window were acknowledged and are lost ...
    assert!(report.lost_enqueues > 0, "{report:#?}");
    assert_eq!(
        report.lost_enqueues, report.phase2_enqueued_unacked,
        "{report:#?}"
    );
    // ... and once the replica counted as lagging, the primary refused.
    assert!(report.phase2_refused > 0, "{report:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_one_replica_loses_nothing_acknowledged() {
    let wait = ReplicaWait {
        replicas: 1,
        timeout: Duration::from_secs(1),
    };
    let report = run_failover(Mode::Wait(wait)).await;
    println!("wait_replicas 1: {report:#?}");
    assert_eq!(report.phase1_anomalies, 0, "{report:#?}");
    assert_eq!(report.phase2_enqueued, 0, "{report:#?}");
    assert!(report.phase2_refused > 0, "{report:#?}");
    assert_eq!(report.lost_enqueues, 0, "{report:#?}");
    assert_eq!(report.undone_acks, 0, "{report:#?}");
    assert_eq!(report.refired, 0, "{report:#?}");
    assert!(!report.seq_reused, "{report:#?}");
    assert_eq!(report.missing_fires, 0, "{report:#?}");
    // The deployment goes on after the failover: phase 1's fires and the
    // catch-up of the stall's fire times were delivered.
    assert!(report.fires_delivered > 0, "{report:#?}");
}
