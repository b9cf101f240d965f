//! Dead letters: running out of attempts, the dead list, redrive.

use std::sync::Arc;

use crate::broker::Broker;
use crate::message::{ListQuery, MessageState, Nack, Redrive, Schedule};
use crate::model::MessageId;
use crate::testkit::support::{self as s, get, lease, lease_one, put, put_now, req};

/// With `max_attempts` 2, the second failed nack makes the message dead;
/// a dead message is not delivered.
pub async fn max_attempts_dead_via_nack(b: Arc<dyn Broker>) {
    let q = s::queue("max_attempts_dead_via_nack", "q");
    s::make_queue(&b, &q, 2).await;
    let out = put_now(&b, &q, "m").await;
    s::nack_times(&b, &q, &out.id, 1).await;
    assert_eq!(get(&b, &q, &out.id).await.state, MessageState::Ready);
    let d = lease_one(&b, &q, None).await;
    assert_eq!(d.attempt, 2);
    let nack = Nack {
        delay_ms: Some(0),
        ..Nack::default()
    };
    s::must(b.nack(&q, &out.id, &d.lease_id, nack).await, "nack");
    let m = get(&b, &q, &out.id).await;
    assert_eq!(m.state, MessageState::Dead, "attempts 2 >= max_attempts 2");
    assert_eq!(m.attempts, 2);
    assert!(lease(&b, &q, 1, 200).await.is_empty(), "dead delivered");
    assert_eq!(s::must(b.get_queue(&q).await, "get_queue").stats.dead, 1);
}

/// An expired lease on the last attempt makes the message dead too, and a
/// message's own `max_attempts` overrides the queue's (both ways).
pub async fn max_attempts_dead_via_expiry(b: Arc<dyn Broker>) {
    let q = s::queue("max_attempts_dead_via_expiry", "q");
    s::make_queue(&b, &q, 10).await;
    let mut short = req(Some("short"), Schedule::Now, "x");
    short.max_attempts = Some(1);
    put(&b, &q, short).await;
    let d = lease_one(&b, &q, Some(150)).await;
    assert_eq!(d.id.as_str(), "short");
    let id = d.id.clone();
    let (b2, q2) = (b.clone(), q.clone());
    s::eventually(5_000, "expired last attempt becomes dead", || {
        let (b, q, id) = (b2.clone(), q2.clone(), id.clone());
        async move { get(&b, &q, &id).await.state == MessageState::Dead }
    })
    .await;
    s::assert_lease_mismatch(b.ack(&q, &id, &d.lease_id).await, "ack after death");

    // Queue max 1, message max 3: the first two failures retry.
    let strict = s::queue("max_attempts_dead_via_expiry", "strict");
    s::make_queue(&b, &strict, 1).await;
    let mut long = req(Some("long"), Schedule::Now, "x");
    long.max_attempts = Some(3);
    let out = put(&b, &strict, long).await;
    s::nack_times(&b, &strict, &out.id, 2).await;
    assert_ne!(get(&b, &strict, &out.id).await.state, MessageState::Dead);
    let d = lease_one(&b, &strict, None).await;
    assert_eq!(d.attempt, 3);
    let nack = Nack {
        delay_ms: Some(0),
        ..Nack::default()
    };
    s::must(b.nack(&strict, &out.id, &d.lease_id, nack).await, "nack");
    assert_eq!(get(&b, &strict, &out.id).await.state, MessageState::Dead);
}

/// Kills the ready messages `ids` one by one, in that order, each in a
/// later millisecond than the one before.
async fn kill_in_order(b: &Arc<dyn Broker>, q: &crate::QueueName, ids: &[&str]) {
    for name in ids {
        let d = lease_one(b, q, None).await;
        assert_eq!(d.id.as_str(), *name, "lease order");
        s::must(b.nack(q, &d.id, &d.lease_id, Nack::default()).await, "nack");
        // It died at or before now; the next one dies in a later ms.
        s::tick_past(s::now_ms()).await;
    }
}

fn dead_page(after: Option<&str>, limit: u32) -> ListQuery {
    ListQuery {
        state: MessageState::Dead,
        after: after.map(s::id),
        limit,
    }
}

/// The dead list is oldest death first (not seq order), and pages with
/// `after` (the last id of the previous page) and `limit`.
pub async fn dead_list_order_and_paging(b: Arc<dyn Broker>) {
    let q = s::queue("dead_list_order_and_paging", "q");
    s::make_queue(&b, &q, 1).await;
    // Death order differs from enqueue order: priorities make the lease
    // order d3, d1, d4, d0, d2.
    for (name, priority) in [("d0", 4), ("d1", 2), ("d2", 5), ("d3", 1), ("d4", 3)] {
        let mut r = req(Some(name), Schedule::Now, name);
        r.priority = Some(priority);
        put(&b, &q, r).await;
    }
    let order = ["d3", "d1", "d4", "d0", "d2"];
    kill_in_order(&b, &q, &order).await;
    let mut seen: Vec<String> = Vec::new();
    let mut after: Option<String> = None;
    for expected_len in [2, 2, 1, 0] {
        let page = s::must(b.list(&q, dead_page(after.as_deref(), 2)).await, "list");
        assert_eq!(page.len(), expected_len, "page after {after:?}: {page:?}");
        assert!(page.iter().all(|m| m.state == MessageState::Dead));
        seen.extend(page.iter().map(|m| m.id.to_string()));
        after = page.last().map(|m| m.id.to_string()).or(after);
    }
    assert_eq!(seen, order, "dead list must be oldest death first");
    let whole = s::must(b.list(&q, dead_page(None, 1_000)).await, "list");
    let ids: Vec<_> = whole.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, order);
}

/// Redrive by ids moves only those that are dead (others ignored) back to
/// ready with attempts reset; redrive all moves the rest.
pub async fn redrive_ids_and_all(b: Arc<dyn Broker>) {
    let q = s::queue("redrive_ids_and_all", "q");
    s::make_queue(&b, &q, 1).await;
    for name in ["x0", "x1", "x2"] {
        put_now(&b, &q, name).await;
    }
    kill_in_order(&b, &q, &["x0", "x1", "x2"]).await;
    put(&b, &q, req(Some("live"), Schedule::Delay(60_000), "l")).await;
    let ids: Vec<MessageId> = ["x1", "live", "nope"].into_iter().map(s::id).collect();
    let n = s::must(b.redrive(&q, Redrive::Ids(ids)).await, "redrive ids");
    assert_eq!(n, 1, "only x1 is dead among the ids");
    let x1 = get(&b, &q, &s::id("x1")).await;
    assert_eq!(x1.state, MessageState::Ready);
    assert_eq!(x1.attempts, 0, "redrive resets attempts");
    assert_eq!(
        get(&b, &q, &s::id("live")).await.state,
        MessageState::Scheduled
    );
    let n = s::must(b.redrive(&q, Redrive::All).await, "redrive all");
    assert_eq!(n, 2);
    let stats = s::must(b.get_queue(&q).await, "get_queue").stats;
    assert_eq!((stats.ready, stats.dead, stats.scheduled), (3, 0, 1));
    let d = lease_one(&b, &q, None).await;
    assert_eq!(d.attempt, 1, "first delivery after redrive is attempt 1");
    assert_eq!(s::must(b.redrive(&q, Redrive::All).await, "redrive"), 0);
}
