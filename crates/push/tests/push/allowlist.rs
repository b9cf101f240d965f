//! The allowlist at delivery: targets refused by the policy (by address
//! after DNS, or an IP literal outside every CIDR) are failed attempts that
//! end in `dead`, and the receiver never sees a request.

use std::time::Duration;

use delayd_core::{MessageState, Schedule};
use delayd_push::PolicyError;

use crate::common::*;

async fn wait_dead(h: &Harness, queue: &str, name: &str) {
    eventually(10_000, "message dead", || async {
        matches!(h.broker.get(&q(queue), &id(name)).await, Ok(m) if m.state == MessageState::Dead)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disallowed_targets_are_refused_at_configuration() {
    let p = policy(&["localhost", "*.hooks.example", "10.0.0.0/8"]);
    assert!(p.check_url("http://localhost:9/x").is_ok());
    assert!(p.check_url("https://a.hooks.example/x").is_ok());
    assert!(p.check_url("http://10.1.2.3/").is_ok());
    let refused = [
        "http://127.0.0.1:9/x",
        "http://169.254.169.254/latest/meta-data",
        "https://example.com/",
        "ftp://localhost/",
        "http://[::1]/",
    ];
    for url in refused {
        assert!(p.check_url(url).is_err(), "{url} must be refused");
    }
    assert!(matches!(
        policy(&[]).check_url("https://example.com/"),
        Err(PolicyError::HostNotAllowed(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn name_resolving_to_loopback_is_refused_at_delivery() {
    let mut receiver = Receiver::start(|_, _| Reply::Status(200)).await;
    // `localhost` is allowed by name, but its loopback addresses are not
    // listed, so the check after resolution refuses every address.
    let h = Harness::start(policy(&["localhost"])).await;
    let url = format!("http://localhost:{}/hook", receiver.addr.port());
    h.push_queue("rebind", push(url, 500, 2, None), 2, retry(50, 2.0))
        .await;
    h.enqueue("rebind", "x", Schedule::Now, b"x", &[]).await;
    wait_dead(&h, "rebind", "x").await;
    assert!(
        receiver.requests.try_recv().is_err(),
        "receiver was reached"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ip_literal_outside_the_allowlist_is_refused_at_delivery() {
    let mut receiver = Receiver::start(|_, _| Reply::Status(200)).await;
    // The queue was configured under an older, wider allowlist (the broker
    // holds the URL); today's policy no longer allows it.
    let h = Harness::start(policy(&["127.0.0.2/32"])).await;
    h.push_queue(
        "stale",
        push(receiver.url(), 500, 2, None),
        2,
        retry(50, 2.0),
    )
    .await;
    h.enqueue("stale", "x", Schedule::Now, b"x", &[]).await;
    wait_dead(&h, "stale", "x").await;
    assert!(
        receiver.requests.try_recv().is_err(),
        "receiver was reached"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_name_and_addresses_are_delivered() {
    let mut receiver = Receiver::start(|_, _| Reply::Status(200)).await;
    let h = Harness::start(policy(&["localhost", "127.0.0.0/8", "::1/128"])).await;
    let url = format!("http://localhost:{}/hook", receiver.addr.port());
    h.push_queue("named", push(url, 2_000, 2, None), 2, retry(50, 2.0))
        .await;
    h.enqueue("named", "x", Schedule::Now, b"hi", &[]).await;
    let r = receiver.next(Duration::from_secs(5)).await;
    assert_eq!((r.header("delayd-id"), r.attempt()), ("x", 1));
    h.stop().await;
}
