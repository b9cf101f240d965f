//! Receivers that never answer or refuse connections: every attempt fails,
//! the message goes to `dead` after `max_attempts`, and a redrive delivers
//! it again.

use std::time::Duration;

use delayd_core::{MessageState, QueueConfigPatch, Redrive, Schedule};

use crate::common::*;

async fn wait_dead(h: &Harness, queue: &str, name: &str, attempts: u32) {
    eventually(10_000, "message dead", || async {
        match h.broker.get(&q(queue), &id(name)).await {
            Ok(m) => m.state == MessageState::Dead && m.attempts == attempts,
            Err(_) => false,
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_exhaust_attempts_then_redrive_delivers() {
    let mut receiver = Receiver::start(|_, _| Reply::Hang).await;
    let h = Harness::start(policy(&["127.0.0.1/32"])).await;
    h.push_queue(
        "hang",
        push(receiver.url(), 200, 2, None),
        3,
        retry(50, 2.0),
    )
    .await;
    h.enqueue("hang", "t", Schedule::Now, b"x", &[]).await;
    let mut attempts = Vec::new();
    for _ in 0..3 {
        attempts.push(receiver.next(Duration::from_secs(5)).await.attempt());
    }
    assert_eq!(attempts, [1, 2, 3]);
    wait_dead(&h, "hang", "t", 3).await;

    receiver.set_script(|_, _| Reply::Status(200));
    let moved = h.broker.redrive(&q("hang"), Redrive::All).await.unwrap();
    assert_eq!(moved, 1);
    let again = receiver.next(Duration::from_secs(5)).await;
    assert_eq!((again.header("delayd-id"), again.attempt()), ("t", 1));
    eventually(5_000, "acked after redrive", || async {
        h.broker.get(&q("hang"), &id("t")).await.is_err()
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_refused_goes_dead_then_redrive_to_a_new_url() {
    // A port with nothing listening: bind, note it, close.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_url = format!("http://{}/hook", closed.local_addr().unwrap());
    drop(closed);
    let h = Harness::start(policy(&["127.0.0.1/32"])).await;
    h.push_queue("refused", push(dead_url, 500, 2, None), 2, retry(50, 2.0))
        .await;
    h.enqueue("refused", "c", Schedule::Now, b"x", &[]).await;
    wait_dead(&h, "refused", "c", 2).await;

    let mut receiver = Receiver::start(|_, _| Reply::Status(200)).await;
    let patch = QueueConfigPatch {
        push: Some(Some(push(receiver.url(), 500, 2, None))),
        // The old worker may still be in its last lease call (up to 200 ms)
        // when the redriven message is ready: it can fail one attempt, and
        // a 400 ms backoff leaves the retry to the new worker.
        max_attempts: Some(5),
        retry: Some(retry(400, 1.0)),
        ..Default::default()
    };
    h.broker.put_queue(&q("refused"), patch).await.unwrap();
    let ids = Redrive::Ids(vec![id("c")]);
    assert_eq!(h.broker.redrive(&q("refused"), ids).await.unwrap(), 1);
    let delivered = receiver.next(Duration::from_secs(5)).await;
    assert_eq!(delivered.header("delayd-id"), "c");
    assert!(
        delivered.attempt() <= 2,
        "attempts were reset by the redrive: {}",
        delivered.attempt()
    );
    h.stop().await;
}
