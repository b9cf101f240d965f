//! Messages arrive after their delay (never before), with the body, the
//! `delayd-*` headers, forwarded headers and a valid signature; then they
//! are acked.

use std::time::Duration;

use delayd_core::{BrokerError, Schedule};
use delayd_push::verify_signature;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivers_after_delay_with_signed_headers() {
    let h = Harness::start(policy(&["127.0.0.1/32"])).await;
    delivers_after_delay(h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivers_after_delay_on_the_model_broker() {
    delivers_after_delay(Harness::start_on_model(policy(&["127.0.0.1/32"]))).await;
}

async fn delivers_after_delay(h: Harness) {
    let mut receiver = Receiver::start(|_, _| Reply::Status(200)).await;
    h.push_queue(
        "orders",
        push(receiver.url(), 2_000, 4, Some("s3cret")),
        5,
        retry(100, 2.0),
    )
    .await;
    let mut expected = Vec::new();
    for (i, delay) in [300u64, 150, 0].into_iter().enumerate() {
        let name = format!("m{i}");
        let body = format!("payload {i}");
        let headers = [("x-trace", "t-1"), ("content-type", "application/json")];
        let deliver_at = h
            .enqueue(
                "orders",
                &name,
                Schedule::Delay(delay),
                body.as_bytes(),
                &headers,
            )
            .await;
        expected.push((name, body, deliver_at));
    }
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(receiver.next(Duration::from_secs(5)).await);
    }
    // Ordered by due time: m2 (now), m1 (150 ms), m0 (300 ms).
    let ids: Vec<&str> = got.iter().map(|r| r.header("delayd-id")).collect();
    assert_eq!(ids, ["m2", "m1", "m0"]);
    for r in &got {
        let (name, body, deliver_at) = expected
            .iter()
            .find(|e| e.0 == r.header("delayd-id"))
            .unwrap();
        assert!(
            r.at_ms >= *deliver_at,
            "{name} early: {} < {deliver_at}",
            r.at_ms
        );
        assert_eq!(r.path, "/hook");
        assert_eq!(r.body, body.as_bytes());
        assert_eq!(r.header("delayd-queue"), "orders");
        assert_eq!(r.header("delayd-attempt"), "1");
        assert_eq!(r.header("delayd-deliver-at"), deliver_at.to_string());
        assert_eq!(r.header("x-trace"), "t-1");
        assert_eq!(r.header("content-type"), "application/json");
        let timestamp: u64 = r.header("delayd-timestamp").parse().unwrap();
        assert!(
            timestamp.abs_diff(r.at_ms / 1000) <= 1,
            "timestamp is unix seconds"
        );
        let signature = r.header("delayd-signature");
        assert!(signature.starts_with("v1="));
        assert!(verify_signature(b"s3cret", timestamp, &r.body, signature));
        assert!(!verify_signature(b"wrong", timestamp, &r.body, signature));
    }
    for (name, ..) in &expected {
        eventually(5_000, "acked", || async {
            matches!(
                h.broker.get(&q("orders"), &id(name)).await,
                Err(BrokerError::MessageNotFound { .. })
            )
        })
        .await;
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_without_secret_and_default_content_type() {
    let mut receiver = Receiver::start(|_, _| Reply::Status(204)).await;
    let h = Harness::start(policy(&["127.0.0.0/8"])).await;
    h.push_queue(
        "plain",
        push(receiver.url(), 2_000, 1, None),
        5,
        retry(100, 2.0),
    )
    .await;
    h.enqueue("plain", "a", Schedule::Now, &[0, 159, 255], &[])
        .await;
    let r = receiver.next(Duration::from_secs(5)).await;
    assert_eq!(r.body.as_ref(), &[0, 159, 255]);
    assert_eq!(r.header("content-type"), "application/octet-stream");
    assert!(r.headers.get("delayd-signature").is_none());
    eventually(5_000, "204 acks", || async {
        h.broker.get(&q("plain"), &id("a")).await.is_err()
    })
    .await;
    h.stop().await;
}

/// api.md "Push credentials": the queue's `push.headers` go with every push
/// request and win over a message header of the same name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_headers_are_sent_with_every_request() {
    let h = Harness::start(policy(&["127.0.0.1/32"])).await;
    let mut receiver = Receiver::start(|_, _| Reply::Status(200)).await;
    let mut config = push(receiver.url(), 2_000, 4, None);
    config.headers = [
        ("Authorization".to_owned(), "Bearer queue-token".to_owned()),
        ("x-tenant".to_owned(), "acme".to_owned()),
    ]
    .into();
    h.push_queue("creds", config, 5, retry(100, 2.0)).await;
    for i in 0..2 {
        let headers = [("authorization", "Bearer from-message")];
        h.enqueue("creds", &format!("c{i}"), Schedule::Now, b"x", &headers)
            .await;
    }
    for _ in 0..2 {
        let r = receiver.next(Duration::from_secs(5)).await;
        assert_eq!(r.header("authorization"), "Bearer queue-token");
        assert_eq!(r.header("x-tenant"), "acme");
    }
    h.stop().await;
}
