//! A ready message wakes exactly one waiting lease call: with 200 calls
//! waiting on a queue, one enqueue costs a handful of state-lock
//! acquisitions (not one per waiter), one call gets the message, and the
//! other 199 keep waiting in line, served in arrival order afterwards.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use delayd_core::testkit::support::eventually;
use delayd_core::{Broker, EnqueueOptions, EnqueueRequest, LeaseRequest, QueueName};
use delayd_local::{LocalBroker, LocalConfig};
use tokio::task::JoinSet;

const WAITERS: usize = 200;

async fn enqueue(broker: &LocalBroker, queue: &QueueName, body: &str) {
    let request = EnqueueRequest {
        payload: body.as_bytes().to_vec(),
        ..EnqueueRequest::default()
    };
    let results = broker
        .enqueue(queue, vec![request], EnqueueOptions::default())
        .await
        .expect("enqueue");
    results[0].clone().expect("enqueued");
}

/// Polls `done` until it holds (5 s at most): the waiters' registration has
/// no event to await.
async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    eventually(5_000, what, || std::future::ready(done())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_ready_message_wakes_one_waiter() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Arc::new(
        LocalBroker::open(LocalConfig::new(dir.path()))
            .await
            .expect("open"),
    );
    let queue = QueueName::new("handoff").expect("name");
    // Set just before the shutdown: a call that ends without it set was
    // woken by something else (an event-driven "only one call returned",
    // which no amount of machine load can make pass trivially).
    let shutting_down = Arc::new(AtomicBool::new(false));
    let mut calls = JoinSet::new();
    for index in 0..WAITERS {
        let caller = Arc::clone(&broker);
        let queue = queue.clone();
        let shutting_down = Arc::clone(&shutting_down);
        calls.spawn(async move {
            let request = LeaseRequest {
                max: 1,
                wait_ms: 20_000,
                lease_ms: None,
            };
            let got = caller.lease(&[queue], request).await;
            (index, got, shutting_down.load(Ordering::SeqCst))
        });
        // Arrival order is registration order.
        let registered = index as u64 + 1;
        wait_until("registration", || {
            broker.store_stats().waiting_leases == registered
        })
        .await;
    }

    let before = broker.store_stats().lock_acquisitions;
    enqueue(&broker, &queue, "first").await;
    let (index, got, _) = calls.join_next().await.expect("a call ends").expect("task");
    let after = broker.store_stats().lock_acquisitions;
    let got = got.expect("lease");
    assert_eq!(got.len(), 1, "the woken call got the message");
    assert_eq!(
        got[0].payload, b"first",
        "with the payload enqueued in the same call"
    );
    assert_eq!(index, 0, "the longest-waiting call is served first");
    // enqueue (1), the sync thread's group (1-2), this stats read (1) and
    // at most a few idle driver rounds; a broadcast would be >= 200.
    let cost = after - before;
    assert!(cost <= 12, "one message cost {cost} lock acquisitions");
    assert_eq!(broker.store_stats().waiting_leases, WAITERS as u64 - 1);

    // The next message goes to the next in line.
    enqueue(&broker, &queue, "second").await;
    let (index, got, _) = calls.join_next().await.expect("a call ends").expect("task");
    assert_eq!(index, 1, "served in arrival order");
    assert_eq!(got.expect("lease")[0].payload, b"second");

    // Shutdown ends the other waits with empty lists; none ended before.
    shutting_down.store(true, Ordering::SeqCst);
    broker.shutdown().await.expect("shutdown");
    while let Some(ended) = calls.join_next().await {
        let (index, got, at_shutdown) = ended.expect("task");
        assert!(at_shutdown, "call {index} returned before the shutdown");
        assert!(got.expect("empty at shutdown").is_empty());
    }
}

/// A waiting call that times out leaves the line: the next message goes
/// to a call that still waits, not to the one that left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_waiter_leaves_the_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Arc::new(
        LocalBroker::open(LocalConfig::new(dir.path()))
            .await
            .expect("open"),
    );
    let queue = QueueName::new("timeouts").expect("name");
    let short = LeaseRequest {
        max: 1,
        wait_ms: 50,
        lease_ms: None,
    };
    assert!(broker
        .lease(std::slice::from_ref(&queue), short)
        .await
        .expect("lease")
        .is_empty());
    assert_eq!(broker.store_stats().waiting_leases, 0, "left the line");
    let waiting = {
        let broker = Arc::clone(&broker);
        let queue = queue.clone();
        tokio::spawn(async move {
            let request = LeaseRequest {
                max: 10,
                wait_ms: 10_000,
                lease_ms: None,
            };
            broker.lease(&[queue], request).await
        })
    };
    wait_until("registration", || broker.store_stats().waiting_leases == 1).await;
    enqueue(&broker, &queue, "m").await;
    let got = waiting.await.expect("task").expect("lease");
    assert_eq!(got.len(), 1);
    broker.shutdown().await.expect("shutdown");
}
