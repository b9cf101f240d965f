//! The dispatcher's metrics: requests by outcome, retries, dead letters.
//! A current-thread runtime keeps every task on the thread whose local
//! recorder the test installed.

use std::time::Duration;

use delayd_core::{MessageState, Schedule};
use delayd_push::metric;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::CompositeKey;

use crate::common::*;

fn counter(snapshot: &[(CompositeKey, DebugValue)], name: &str, outcome: Option<&str>) -> u64 {
    snapshot
        .iter()
        .filter(|(key, _)| key.key().name() == name)
        .filter(|(key, _)| {
            outcome.is_none_or(|o| {
                key.key()
                    .labels()
                    .any(|l| l.key() == "outcome" && l.value() == o)
            })
        })
        .map(|(_, value)| match value {
            DebugValue::Counter(n) => *n,
            _ => 0,
        })
        .sum()
}

#[tokio::test(flavor = "current_thread")]
async fn outcomes_retries_and_dead_letters_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _guard = metrics::set_default_local_recorder(&recorder);

    // "good" fails once then succeeds; "bad" fails both of its attempts.
    let mut receiver = Receiver::start(|_, r| {
        if r.header("delayd-id") == "bad" || r.attempt() == 1 {
            Reply::Status(500)
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let h = Harness::start_on_model(policy(&["127.0.0.1/32"]));
    h.push_queue(
        "counted",
        push(receiver.url(), 2_000, 2, None),
        2,
        retry(50, 1.0),
    )
    .await;
    h.enqueue("counted", "good", Schedule::Now, b"x", &[]).await;
    h.enqueue("counted", "bad", Schedule::Now, b"x", &[]).await;
    for _ in 0..4 {
        receiver.next(Duration::from_secs(5)).await;
    }
    eventually(5_000, "good acked, bad dead", || async {
        let good_gone = h.broker.get(&q("counted"), &id("good")).await.is_err();
        let bad = h.broker.get(&q("counted"), &id("bad")).await;
        good_gone && matches!(bad, Ok(m) if m.state == MessageState::Dead)
    })
    .await;
    h.stop().await;

    let snapshot: Vec<(CompositeKey, DebugValue)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| (key, value))
        .collect();
    let total = |outcome| counter(&snapshot, metric::PUSH_DELIVERIES_TOTAL, Some(outcome));
    assert_eq!(total("delivered"), 1);
    assert_eq!(total("http_error"), 3);
    assert_eq!(counter(&snapshot, metric::PUSH_RETRIES_TOTAL, None), 2);
    assert_eq!(
        counter(&snapshot, metric::PUSH_DEAD_LETTERED_TOTAL, None),
        1
    );
    let latency_recorded = snapshot.iter().any(|(key, value)| {
        key.key().name() == metric::PUSH_LATENCY_SECONDS
            && matches!(value, DebugValue::Histogram(v) if v.len() == 4)
    });
    assert!(latency_recorded, "one latency sample per request");
}
