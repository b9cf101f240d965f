//! Message identity: idempotent enqueue, ids freed by ack and cancel,
//! generated ids, `seq`, and batches.

use std::collections::HashSet;
use std::sync::Arc;

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::message::{EnqueueOptions, EnqueueRequest, MessageState, Schedule};
use crate::testkit::support::{self as s, get, lease_one, put, put_now, req};

/// Re-enqueueing an id that is live in any state (scheduled, ready, leased,
/// dead) answers `created: false` with the existing message and changes
/// nothing.
pub async fn idempotent_enqueue_in_every_state(b: Arc<dyn Broker>) {
    let q = s::queue("idempotent_enqueue_in_every_state", "q");
    s::make_queue(&b, &q, 1).await;
    let dead = put_now(&b, &q, "dead").await;
    s::nack_times(&b, &q, &dead.id, 1).await;
    let leased = put_now(&b, &q, "leased").await;
    let lease = lease_one(&b, &q, None).await;
    assert_eq!(lease.id, leased.id);
    let ready = put_now(&b, &q, "ready").await;
    let scheduled = put(
        &b,
        &q,
        req(Some("scheduled"), Schedule::Delay(60_000), "sch"),
    )
    .await;

    let cases = [
        (dead, MessageState::Dead),
        (leased, MessageState::Leased),
        (ready, MessageState::Ready),
        (scheduled, MessageState::Scheduled),
    ];
    for (first, state) in cases {
        let before = get(&b, &q, &first.id).await;
        let mut again = req(Some(first.id.as_str()), Schedule::Delay(5_000), "other");
        again.priority = Some(1);
        let out = put(&b, &q, again).await;
        assert!(
            !out.created,
            "{state} id re-enqueued: must be created=false"
        );
        assert_eq!(
            out.seq, first.seq,
            "{state}: outcome must describe the existing message"
        );
        assert_eq!(
            out.deliver_at, before.deliver_at,
            "{state}: deliver_at changed"
        );
        let after = get(&b, &q, &first.id).await;
        assert_eq!(after.state, state, "{state}: state changed");
        assert_eq!(after.payload, before.payload, "{state}: payload changed");
        assert_eq!(after.priority, before.priority, "{state}: priority changed");
        assert_eq!(after.attempts, before.attempts, "{state}: attempts changed");
    }
    let stats = s::must(b.get_queue(&q).await, "get_queue").stats;
    assert_eq!(
        (stats.scheduled, stats.ready, stats.leased, stats.dead),
        (1, 1, 1, 1),
        "duplicates must not add messages"
    );
}

/// After ack, and after cancel, the id is free: enqueueing it again creates
/// a new message with a new, larger seq.
pub async fn id_free_after_ack_and_cancel(b: Arc<dyn Broker>) {
    let q = s::queue("id_free_after_ack_and_cancel", "q");
    let first = put_now(&b, &q, "x").await;
    let d = lease_one(&b, &q, None).await;
    s::must(b.ack(&q, &d.id, &d.lease_id).await, "ack");
    s::assert_not_found(b.get(&q, &first.id).await, "get after ack");
    let second = put_now(&b, &q, "x").await;
    assert!(second.created, "id must be free after ack");
    assert!(second.seq > first.seq, "a new message gets a new seq");
    s::must(b.cancel(&q, &second.id).await, "cancel");
    let third = put_now(&b, &q, "x").await;
    assert!(third.created, "id must be free after cancel");
    assert!(third.seq > second.seq);
    assert_eq!(get(&b, &q, &third.id).await.attempts, 0, "a fresh message");
}

/// Generated ids are unique; seq increases across and within calls.
pub async fn generated_ids_unique_and_seq_increasing(b: Arc<dyn Broker>) {
    let q = s::queue("generated_ids_unique_and_seq_increasing", "q");
    let mut seqs = Vec::new();
    let mut ids = HashSet::new();
    for _ in 0..3 {
        let batch = (0..40).map(|_| req(None, Schedule::Now, "g")).collect();
        let results = s::must(
            b.enqueue(&q, batch, EnqueueOptions::default()).await,
            "enqueue",
        );
        for r in results {
            let out = s::must(r, "batch item");
            assert!(out.created);
            assert!(ids.insert(out.id.clone()), "generated id {} twice", out.id);
            seqs.push(out.seq);
        }
        let single = put(&b, &q, req(None, Schedule::Now, "g")).await;
        assert!(ids.insert(single.id.clone()), "generated id twice");
        seqs.push(single.seq);
    }
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "seq must increase in enqueue order: {seqs:?}"
    );
}

/// A batch answers in input order; an invalid item fails alone, and an id
/// repeated within the batch is `created: false` the second time, also
/// for a message due far ahead (a store keeps those on disk only).
pub async fn batch_results_in_order(b: Arc<dyn Broker>) {
    let q = s::queue("batch_results_in_order", "q");
    let invalid = EnqueueRequest {
        id: Some(s::id("bad")),
        max_attempts: Some(0),
        ..EnqueueRequest::default()
    };
    let batch = vec![
        req(Some("a"), Schedule::Now, "a1"),
        invalid,
        req(Some("b"), Schedule::Delay(60_000), "b"),
        req(Some("a"), Schedule::Now, "a2"),
        req(Some("far"), Schedule::Delay(86_400_000), "f1"),
        req(Some("far"), Schedule::Delay(86_400_000), "f2"),
    ];
    let results = s::must(
        b.enqueue(&q, batch, EnqueueOptions::default()).await,
        "enqueue",
    );
    assert_eq!(results.len(), 6, "one result per item: {results:?}");
    let a = s::must(results[0].clone(), "item 0");
    assert!(a.created && a.id.as_str() == "a");
    assert!(
        matches!(results[1], Err(BrokerError::InvalidArgument(_))),
        "max_attempts 0 must be InvalidArgument, got {:?}",
        results[1]
    );
    let b_out = s::must(results[2].clone(), "item 2");
    assert!(b_out.created && b_out.id.as_str() == "b" && b_out.seq > a.seq);
    let dup = s::must(results[3].clone(), "item 3");
    assert!(
        !dup.created,
        "second 'a' in one batch must be created=false"
    );
    assert_eq!(dup.seq, a.seq);
    assert_eq!(get(&b, &q, &a.id).await.payload, b"a1", "first 'a' wins");
    let far = s::must(results[4].clone(), "item 4");
    let far_dup = s::must(results[5].clone(), "item 5");
    assert!(
        far.created && !far_dup.created && far_dup.seq == far.seq,
        "an id due far ahead repeated in one batch is one message: {far:?} {far_dup:?}"
    );
    let stats = s::must(b.get_queue(&q).await, "get_queue").stats;
    assert_eq!(stats.scheduled, 2, "b and far: {stats:?}");
    s::assert_not_found(b.get(&q, &s::id("bad")).await, "invalid item");
}
