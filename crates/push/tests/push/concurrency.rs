//! `push.concurrency` bounds requests in flight per queue, and a queue whose
//! receiver hangs does not hold up another queue's deliveries.

use std::time::{Duration, Instant};

use delayd_core::Schedule;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_limit_is_honoured() {
    let mut receiver = Receiver::start(|_, _| Reply::After(Duration::from_millis(40), 200)).await;
    let h = Harness::start(policy(&["127.0.0.1/32"])).await;
    h.push_queue(
        "limited",
        push(receiver.url(), 2_000, 3, None),
        5,
        retry(100, 2.0),
    )
    .await;
    for i in 0..24 {
        h.enqueue("limited", &format!("m{i}"), Schedule::Now, b"x", &[])
            .await;
    }
    for _ in 0..24 {
        receiver.next(Duration::from_secs(10)).await;
    }
    // 24 requests of 40 ms each, at most 3 at a time: the limit is reached
    // and never exceeded.
    assert_eq!(receiver.max_in_flight(), 3);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_receiver_does_not_delay_other_queues() {
    let mut stuck = Receiver::start(|_, _| Reply::Hang).await;
    let mut fast = Receiver::start(|_, _| Reply::Status(200)).await;
    let h = Harness::start(policy(&["127.0.0.1/32"])).await;
    h.push_queue(
        "stuck",
        push(stuck.url(), 30_000, 2, None),
        5,
        retry(100, 2.0),
    )
    .await;
    h.push_queue("fast", push(fast.url(), 2_000, 2, None), 5, retry(100, 2.0))
        .await;
    for i in 0..6 {
        h.enqueue("stuck", &format!("s{i}"), Schedule::Now, b"x", &[])
            .await;
    }
    stuck.next(Duration::from_secs(5)).await;
    stuck.next(Duration::from_secs(5)).await;
    let started = Instant::now();
    for i in 0..20 {
        h.enqueue("fast", &format!("f{i}"), Schedule::Now, b"x", &[])
            .await;
    }
    for _ in 0..20 {
        fast.next(Duration::from_secs(5)).await;
    }
    // Far below the stuck queue's 30 s timeout, with room for a loaded CI.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // The stuck queue still has exactly its two requests in flight.
    assert_eq!(stuck.max_in_flight(), 2);
    assert!(stuck.requests.try_recv().is_err());
    h.stop().await;
}
