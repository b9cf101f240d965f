//! greenstalk's `test_delays` (issue 31): `release(job, delay=2)`, then
//! `reserve(timeout=1)` times out, then `reserve(timeout=1)` must return
//! the job, which falls due at (or a moment before) that reserve's
//! deadline. delayd answered `TIMED_OUT` when its driver had not yet made
//! the job ready; a lease call now settles time at its deadline before it
//! answers empty.
//!
//! On virtual time (tokio's clock paused, the broker and the listener
//! reading a `VirtualClock` that follows it), so the job's due time and the
//! reserve's deadline meet to the millisecond in every run, however loaded
//! the machine: once with the driver running (which now and then gets there
//! first), once with it held, where only the reserve's own catch-up can
//! find the job.

use std::sync::Arc;
use std::time::Duration;

use delayd_beanstalk::{BeanstalkConfig, BeanstalkServer};
use delayd_core::testkit::support::VirtualClock;
use delayd_local::{Durability, LocalBroker, LocalConfig};

use crate::common::Client;

/// Runs of the sequence per test.
const RUNS: u32 = 200;

/// A listener over a fresh LocalBroker on `clock`; the directory lives as
/// long as the returned guard.
async fn serve(
    clock: Arc<VirtualClock>,
    hold: bool,
) -> (Client, Arc<LocalBroker>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = LocalConfig::new(dir.path());
    config.clock = clock.clone();
    config.durability = Durability::Never;
    let broker = Arc::new(LocalBroker::open(config).await.expect("open LocalBroker"));
    broker.hold_driver(hold);
    let addr = "127.0.0.1:0".parse().expect("address");
    let server =
        BeanstalkServer::bind_with_clock(addr, broker.clone(), BeanstalkConfig::default(), clock)
            .await
            .expect("bind");
    let addr = server.local_addr();
    tokio::spawn(server.run(std::future::pending()));
    (Client::connect(addr).await, broker, dir)
}

/// greenstalk's sequence, `RUNS` times, each started at a different
/// offset within the second so the deadline meets the due time at
/// different points of the driver's rounds.
async fn delays_sequence(hold: bool) {
    let (mut c, _broker, _dir) = serve(Arc::new(VirtualClock::new()), hold).await;
    for run in 0..RUNS {
        tokio::time::sleep(Duration::from_millis(u64::from(run % 97))).await;
        let id = c.put(0, 0, 60, "delayed").await;
        let (word, got, _) = c.job("reserve").await.expect("reserve the job");
        assert_eq!((word.as_str(), got), ("RESERVED", id), "run {run}");
        assert_eq!(
            c.cmd(&format!("release {id} 0 2")).await,
            "RELEASED",
            "run {run}"
        );
        assert_eq!(
            c.cmd("reserve-with-timeout 1").await,
            "TIMED_OUT",
            "run {run}: the job is due in 2 s, not 1"
        );
        let second = c.job("reserve-with-timeout 1").await;
        let (word, got, _) = second.unwrap_or_else(|reply| {
            panic!("run {run} (driver held: {hold}): the job fell due at the deadline, got {reply}")
        });
        assert_eq!((word.as_str(), got), ("RESERVED", id), "run {run}");
        assert_eq!(c.cmd(&format!("delete {id}")).await, "DELETED", "run {run}");
    }
}

#[tokio::test(start_paused = true)]
async fn job_due_at_reserve_deadline_is_reserved() {
    delays_sequence(false).await;
}

#[tokio::test(start_paused = true)]
async fn job_due_at_reserve_deadline_is_reserved_with_driver_held() {
    delays_sequence(true).await;
}
