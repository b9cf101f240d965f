//! Failed attempts are retried with the queue's growing backoff, the
//! attempt header counts up, `Retry-After` is honoured up to `retry.max_ms`,
//! and redirects are not followed.

use std::time::Duration;

use delayd_core::{RetryPolicy, Schedule};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_retried_with_growing_delays() {
    let mut receiver = Receiver::start(|n, _| Reply::Status(if n < 3 { 500 } else { 200 })).await;
    let h = Harness::start(policy(&["127.0.0.1/32"])).await;
    h.push_queue(
        "jobs",
        push(receiver.url(), 2_000, 4, None),
        10,
        retry(100, 2.0),
    )
    .await;
    h.enqueue("jobs", "j", Schedule::Now, b"x", &[]).await;
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(receiver.next(Duration::from_secs(5)).await);
    }
    let attempts: Vec<u32> = got.iter().map(|r| r.attempt()).collect();
    assert_eq!(attempts, [1, 2, 3, 4]);
    let gaps: Vec<Duration> = got.windows(2).map(|w| w[1].at - w[0].at).collect();
    // Backoff 100, 200, 400 ms (+ up to 10% jitter), counted from the failure.
    for (gap, floor) in gaps.iter().zip([100u64, 200, 400]) {
        assert!(
            *gap >= Duration::from_millis(floor),
            "gap {gap:?} < {floor} ms"
        );
        assert!(
            *gap < Duration::from_millis(floor * 3 + 200),
            "gap {gap:?} too long"
        );
    }
    assert!(
        gaps[0] < gaps[1] && gaps[1] < gaps[2],
        "gaps grow: {gaps:?}"
    );
    eventually(5_000, "acked after the 200", || async {
        h.broker.get(&q("jobs"), &id("j")).await.is_err()
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_honoured_but_bounded_by_max_backoff() {
    let mut receiver = Receiver::start(|n, _| match n {
        0 => Reply::With(503, vec![("retry-after", "1".into())]),
        1 => Reply::With(429, vec![("retry-after", "3600".into())]),
        _ => Reply::Status(200),
    })
    .await;
    let h = Harness::start(policy(&["127.0.0.1/32"])).await;
    // The backoff alone would wait 20 ms; Retry-After asks 1 s, then an hour,
    // which max_ms caps at 600 ms.
    let retry = RetryPolicy {
        initial_ms: 20,
        max_ms: 600,
        multiplier: 1.0,
    };
    h.push_queue("limited", push(receiver.url(), 2_000, 1, None), 10, retry)
        .await;
    h.enqueue("limited", "r", Schedule::Now, b"x", &[]).await;
    let first = receiver.next(Duration::from_secs(5)).await;
    let second = receiver.next(Duration::from_secs(5)).await;
    let third = receiver.next(Duration::from_secs(5)).await;
    let honoured = second.at - first.at;
    assert!(
        honoured >= Duration::from_millis(600),
        "Retry-After ignored: {honoured:?}"
    );
    assert!(honoured < Duration::from_millis(1_500), "{honoured:?}");
    let capped = third.at - second.at;
    assert!(capped >= Duration::from_millis(600), "{capped:?}");
    assert!(
        capped < Duration::from_millis(1_500),
        "not capped by max_ms: {capped:?}"
    );
    assert_eq!(third.attempt(), 3);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_failures_and_not_followed() {
    let mut receiver = Receiver::start(|n, _| match n {
        0 => Reply::With(302, vec![("location", "/elsewhere".into())]),
        _ => Reply::Status(200),
    })
    .await;
    let h = Harness::start(policy(&["127.0.0.1/32"])).await;
    h.push_queue(
        "moved",
        push(receiver.url(), 2_000, 1, None),
        10,
        retry(50, 1.0),
    )
    .await;
    h.enqueue("moved", "m", Schedule::Now, b"x", &[]).await;
    let first = receiver.next(Duration::from_secs(5)).await;
    let second = receiver.next(Duration::from_secs(5)).await;
    assert_eq!((first.path.as_str(), first.attempt()), ("/hook", 1));
    // The retry goes to the configured URL again, not to the Location.
    assert_eq!((second.path.as_str(), second.attempt()), ("/hook", 2));
    h.stop().await;
}

/// A failed push is recorded as the message's `last_error`: the status and
/// the first 256 bytes of the answer's body (api.md, Message history).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_push_is_the_last_error() {
    let body = format!("template missing: {}", "x".repeat(400));
    let answer = body.clone();
    let receiver = Receiver::start(move |_, _| Reply::Body(500, answer.clone())).await;
    let h = Harness::start(policy(&["127.0.0.1/32"])).await;
    h.push_queue(
        "jobs",
        push(receiver.url(), 2_000, 4, None),
        10,
        retry(60_000, 2.0),
    )
    .await;
    h.enqueue("jobs", "j", Schedule::Now, b"x", &[]).await;
    let want = format!("HTTP 500: {}", &body[..256]);
    eventually(5_000, "the failure recorded", || async {
        let m = h.broker.get(&q("jobs"), &id("j")).await.unwrap();
        m.last_error.as_deref() == Some(want.as_str())
    })
    .await;
    h.stop().await;
}
