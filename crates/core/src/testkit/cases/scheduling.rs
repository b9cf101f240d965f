//! When messages become deliverable, and how waiting lease calls follow.

use std::sync::Arc;
use tokio::time::Instant;

use crate::broker::Broker;
use crate::message::{MessageState, Schedule};
use crate::testkit::support::{self as s, get, lease, put, req, SLACK_MS};

/// A delayed message is not delivered before `now + delay`, and a waiting
/// lease gets it soon after (not at the end of its wait).
pub async fn never_early_with_delay(b: Arc<dyn Broker>) {
    let q = s::queue("never_early_with_delay", "q");
    let before = s::now_ms();
    let out = put(&b, &q, req(Some("m"), Schedule::Delay(300), "x")).await;
    let after = s::now_ms();
    assert!(
        out.deliver_at >= before + 300 && out.deliver_at <= after + 300,
        "deliver_at {} not within now+300 ({before}..{after})",
        out.deliver_at
    );
    assert!(lease(&b, &q, 1, 0).await.is_empty(), "delivered early");
    assert_due_delivery(&b, &q, out.deliver_at).await;
}

/// Same for an absolute `deliver_at`, which is kept exactly.
pub async fn never_early_with_deliver_at(b: Arc<dyn Broker>) {
    let q = s::queue("never_early_with_deliver_at", "q");
    let at = s::now_ms() + 300;
    let out = put(&b, &q, req(Some("m"), Schedule::At(at), "x")).await;
    assert_eq!(out.deliver_at, at, "deliver_at must be kept as given");
    assert!(lease(&b, &q, 1, 0).await.is_empty(), "delivered early");
    assert_due_delivery(&b, &q, at).await;
}

/// Leases with a 5 s wait and checks the message came at or after `due`,
/// and within [`SLACK_MS`] of it.
async fn assert_due_delivery(b: &Arc<dyn Broker>, q: &crate::QueueName, due: u64) {
    let got = lease(b, q, 1, 5_000).await;
    let at = s::now_ms();
    assert_eq!(got.len(), 1, "waiting lease returned {got:?}");
    assert!(at >= due, "delivered {} ms early", due - at);
    assert!(
        at <= due + SLACK_MS,
        "waiting lease returned {} ms after due (should wake when due)",
        at - due
    );
    assert_eq!(got[0].deliver_at, due);
    assert_eq!(got[0].attempt, 1);
}

/// A `deliver_at` in the past means deliver now, and the message keeps the
/// given value.
pub async fn past_deliver_at_is_now_and_kept(b: Arc<dyn Broker>) {
    let q = s::queue("past_deliver_at_is_now_and_kept", "q");
    let past = s::now_ms() - 60_000;
    let out = put(&b, &q, req(Some("m"), Schedule::At(past), "x")).await;
    assert_eq!(out.deliver_at, past);
    let m = get(&b, &q, &out.id).await;
    assert_eq!(m.state, MessageState::Ready);
    assert_eq!(m.deliver_at, past);
    let got = lease(&b, &q, 1, 0).await;
    assert_eq!(got.len(), 1, "a past deliver_at must be ready at once");
    assert_eq!(got[0].deliver_at, past);
}

/// A lease waiting on an empty queue gets a message enqueued meanwhile.
pub async fn lease_wait_wakes_on_enqueue(b: Arc<dyn Broker>) {
    let q = s::queue("lease_wait_wakes_on_enqueue", "q");
    s::make_queue(&b, &q, 10).await;
    let waiter = {
        let (b, q) = (b.clone(), q.clone());
        tokio::spawn(async move { lease(&b, &q, 1, 10_000).await })
    };
    // Give the waiter a head start; either order must deliver.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let start = Instant::now();
    put(&b, &q, req(Some("m"), Schedule::Now, "x")).await;
    let got = waiter
        .await
        .unwrap_or_else(|e| panic!("waiting lease task: {e}"));
    assert_eq!(got.len(), 1, "waiting lease did not get the new message");
    assert!(
        start.elapsed().as_millis() as u64 <= SLACK_MS,
        "waiting lease took {:?} to see an enqueue",
        start.elapsed()
    );
}

/// A lease with nothing to give waits about `wait_ms`, then returns empty.
pub async fn lease_wait_times_out_empty(b: Arc<dyn Broker>) {
    let q = s::queue("lease_wait_times_out_empty", "q");
    s::make_queue(&b, &q, 10).await;
    put(&b, &q, req(Some("later"), Schedule::Delay(60_000), "x")).await;
    let start = Instant::now();
    let got = lease(&b, &q, 1, 400).await;
    let took = start.elapsed().as_millis() as u64;
    assert!(got.is_empty(), "nothing was due, got {got:?}");
    assert!(took >= 350, "returned after {took} ms, before wait_ms 400");
    assert!(
        took <= 400 + SLACK_MS,
        "returned after {took} ms, wait_ms 400"
    );
}

/// Leasing from an unknown queue is empty (also when waiting) and does not
/// create the queue.
pub async fn lease_unknown_queue_is_empty(b: Arc<dyn Broker>) {
    let q = s::queue("lease_unknown_queue_is_empty", "q");
    assert!(lease(&b, &q, 1, 0).await.is_empty());
    assert!(lease(&b, &q, 1, 100).await.is_empty());
    s::assert_queue_not_found(b.get_queue(&q).await, "get_queue after lease");
    let all = s::must(b.list_queues().await, "list_queues");
    assert!(
        all.iter().all(|info| info.name != q),
        "lease created the queue"
    );
}

/// Ready messages go out by (priority, deliver_at, seq), and `max` caps a
/// lease call.
pub async fn ready_order_and_lease_max(b: Arc<dyn Broker>) {
    let q = s::queue("ready_order_and_lease_max", "q");
    s::make_queue(&b, &q, 10).await;
    let base = s::now_ms() - 10_000;
    // (id, priority, deliver_at offset); expected order by (prio, at, seq).
    let items = [
        ("a", 5, 30),
        ("b", 1, 50),
        ("c", 5, 10),
        ("d", 1, 50),
        ("e", 0, 90),
        ("f", 5, 10),
        ("g", 2000, 0),
        ("h", 1024, 0),
    ];
    for (name, priority, offset) in items {
        let mut r = req(Some(name), Schedule::At(base + offset), name);
        r.priority = Some(priority);
        put(&b, &q, r).await;
    }
    let expected = ["e", "b", "d", "c", "f", "a", "h", "g"];
    let first = lease(&b, &q, 3, 0).await;
    assert_eq!(first.len(), 3, "max 3 must give 3 of 8 ready");
    let rest = lease(&b, &q, 100, 0).await;
    assert_eq!(rest.len(), 5, "max 100 must give the other 5");
    let order: Vec<_> = first.iter().chain(&rest).map(|d| d.id.as_str()).collect();
    assert_eq!(
        order, expected,
        "delivery order (priority, deliver_at, seq)"
    );
    assert!(lease(&b, &q, 10, 0).await.is_empty(), "all were leased");
}
