//! Leases, acks, nacks and extends: the at-least-once retry path.

use std::sync::Arc;

use crate::broker::Broker;
use crate::message::{MessageState, Nack, Reschedule, Schedule};
use crate::model::LeaseId;
use crate::testkit::support::{self as s, get, lease, lease_one, put_now, SLACK_MS};

/// An expired lease is a failed attempt: the message comes back (attempt
/// 2) after the backoff counted from the expiry; the stale lease can no
/// longer ack (`LeaseMismatch`), the new one can, and a second ack finds
/// no message.
pub async fn lease_expiry_is_failed_attempt(b: Arc<dyn Broker>) {
    let q = s::queue("lease_expiry_is_failed_attempt", "q");
    s::make_queue(&b, &q, 5).await;
    let out = put_now(&b, &q, "m").await;
    let first = lease_one(&b, &q, Some(200)).await;
    assert_eq!(first.attempt, 1);
    let second = lease_one(&b, &q, None).await;
    let at = s::now_ms();
    assert_eq!(second.id, out.id);
    assert_eq!(second.attempt, 2, "redelivery after expiry is attempt 2");
    assert_ne!(
        second.lease_id, first.lease_id,
        "each delivery has its own lease"
    );
    // Backoff after attempt 1 is initial_ms = 100, counted from the expiry.
    assert!(
        at >= first.lease_until + 100,
        "redelivered at {at}, before lease_until {} + backoff 100",
        first.lease_until
    );
    assert!(second.deliver_at >= first.lease_until + 100);
    assert!(
        at <= first.lease_until + 110 + SLACK_MS,
        "redelivery too late"
    );
    let stale = b.ack(&q, &out.id, &first.lease_id).await;
    s::assert_lease_mismatch(stale, "ack with the expired lease");
    s::must(b.ack(&q, &out.id, &second.lease_id).await, "ack");
    s::assert_not_found(b.ack(&q, &out.id, &second.lease_id).await, "double ack");
}

/// A nack with `delay_ms` schedules the message exactly that far from the
/// nack; it is not delivered earlier.
pub async fn nack_with_explicit_delay(b: Arc<dyn Broker>) {
    let q = s::queue("nack_with_explicit_delay", "q");
    s::make_queue(&b, &q, 5).await;
    let out = put_now(&b, &q, "m").await;
    let d = lease_one(&b, &q, None).await;
    let before = s::now_ms();
    let nack = Nack {
        delay_ms: Some(300),
        ..Nack::default()
    };
    s::must(b.nack(&q, &out.id, &d.lease_id, nack).await, "nack");
    let after = s::now_ms();
    let m = get(&b, &q, &out.id).await;
    assert_eq!(m.state, MessageState::Scheduled);
    assert!(
        m.deliver_at >= before + 300 && m.deliver_at <= after + 300,
        "nack delay 300: deliver_at {} not in {before}+300..{after}+300",
        m.deliver_at
    );
    assert!(
        lease(&b, &q, 1, 0).await.is_empty(),
        "delivered before the nack delay"
    );
    let again = lease_one(&b, &q, None).await;
    assert!(s::now_ms() >= m.deliver_at, "delivered early");
    assert_eq!(again.attempt, 2);
    s::assert_lease_mismatch(
        b.nack(&q, &out.id, &d.lease_id, Nack::default()).await,
        "nack with the old lease",
    );
}

/// A nack without delay uses the queue's backoff: initial_ms after the
/// first attempt, doubled after the second (plus at most 10% jitter).
pub async fn nack_with_backoff(b: Arc<dyn Broker>) {
    let q = s::queue("nack_with_backoff", "q");
    s::make_queue(&b, &q, 5).await;
    let out = put_now(&b, &q, "m").await;
    for (attempt, backoff) in [(1_u32, 100_u64), (2, 200)] {
        let d = lease_one(&b, &q, None).await;
        assert_eq!(d.attempt, attempt);
        let before = s::now_ms();
        s::must(
            b.nack(&q, &out.id, &d.lease_id, Nack::default()).await,
            "nack",
        );
        let after = s::now_ms();
        let m = get(&b, &q, &out.id).await;
        assert!(
            m.deliver_at >= before + backoff && m.deliver_at <= after + backoff + backoff / 10,
            "attempt {attempt}: backoff {backoff}: deliver_at {} vs nack at {before}..{after}",
            m.deliver_at
        );
        assert_eq!(m.attempts, attempt);
    }
}

/// `extend` moves `lease_until`; the message stays leased past the original
/// expiry and the lease still acks.
pub async fn extend_keeps_lease(b: Arc<dyn Broker>) {
    let q = s::queue("extend_keeps_lease", "q");
    s::make_queue(&b, &q, 5).await;
    let out = put_now(&b, &q, "m").await;
    let d = lease_one(&b, &q, Some(300)).await;
    let before = s::now_ms();
    let until = s::must(
        b.extend(&q, &out.id, &d.lease_id, Some(5_000)).await,
        "extend",
    );
    assert!(until >= before + 5_000, "lease_until {until} < now + 5000");
    let wrong = LeaseId("not-a-lease".into());
    s::assert_lease_mismatch(b.extend(&q, &out.id, &wrong, Some(1_000)).await, "extend");
    // Past the original expiry (300 ms) nothing is redelivered.
    assert!(
        lease(&b, &q, 1, 700).await.is_empty(),
        "redelivered while extended"
    );
    assert_eq!(get(&b, &q, &out.id).await.state, MessageState::Leased);
    s::must(b.ack(&q, &out.id, &d.lease_id).await, "ack after extend");
}

/// Message operations on a queue that does not exist answer
/// `MessageNotFound` (the message does not exist); queue operations answer
/// `QueueNotFound`.
pub async fn unknown_queue_errors(b: Arc<dyn Broker>) {
    let q = s::queue("unknown_queue_errors", "q");
    let id = s::id("m");
    let lease = LeaseId("l".into());
    s::assert_not_found(b.get(&q, &id).await, "get");
    s::assert_not_found(b.cancel(&q, &id).await, "cancel");
    s::assert_not_found(b.ack(&q, &id, &lease).await, "ack");
    s::assert_not_found(b.nack(&q, &id, &lease, Nack::default()).await, "nack");
    s::assert_not_found(b.extend(&q, &id, &lease, None).await, "extend");
    let change = Reschedule {
        schedule: Some(Schedule::Now),
        priority: None,
    };
    s::assert_not_found(b.reschedule(&q, &id, change).await, "reschedule");
    s::assert_queue_not_found(b.get_queue(&q).await, "get_queue");
    s::assert_queue_not_found(b.delete_queue(&q).await, "delete_queue");
    s::assert_queue_not_found(b.pause(&q, None).await, "pause");
    s::assert_queue_not_found(b.resume(&q).await, "resume");
    let query = crate::message::ListQuery {
        state: MessageState::Dead,
        after: None,
        limit: 10,
    };
    s::assert_queue_not_found(b.list(&q, query).await, "list");
    s::assert_queue_not_found(b.redrive(&q, crate::Redrive::All).await, "redrive");
    s::assert_queue_not_found(b.get_queue(&q).await, "no call above created it");
}

/// `ack_many` acks each item as `ack` would, independently and in input
/// order: a valid lease acks, an expired (superseded) lease is
/// `LeaseMismatch`, an unknown id is `MessageNotFound`; more than
/// `MAX_BATCH` items is `InvalidArgument` and acks nothing; on an unknown
/// queue every item is `MessageNotFound`.
pub async fn ack_many_items_independent(b: Arc<dyn Broker>) {
    let q = s::queue("ack_many_items_independent", "q");
    s::make_queue(&b, &q, 5).await;
    let one = put_now(&b, &q, "one").await;
    let two = put_now(&b, &q, "two").await;
    let three = put_now(&b, &q, "three").await;
    let leased = lease(&b, &q, 3, 0).await;
    assert_eq!(leased.len(), 3, "three ready messages");
    let lease_of = |id: &crate::model::MessageId| {
        leased
            .iter()
            .find(|d| &d.id == id)
            .map(|d| d.lease_id.clone())
            .expect("leased")
    };
    // `three`'s first lease expires and is superseded by a second one.
    s::must(
        b.nack(
            &q,
            &three.id,
            &lease_of(&three.id),
            Nack {
                delay_ms: Some(0),
                ..Nack::default()
            },
        )
        .await,
        "nack three",
    );
    let again = lease_one(&b, &q, None).await;
    assert_eq!(again.id, three.id);

    // Too many items: refused whole, nothing acked.
    let too_many: Vec<_> = (0..=crate::MAX_BATCH)
        .map(|_| (one.id.clone(), lease_of(&one.id)))
        .collect();
    let refused = b.ack_many(&q, too_many).await;
    assert!(
        matches!(refused, Err(crate::BrokerError::InvalidArgument(_))),
        "more than MAX_BATCH acks: expected InvalidArgument, got {refused:?}"
    );
    assert_eq!(get(&b, &q, &one.id).await.state, MessageState::Leased);

    let items = vec![
        (one.id.clone(), lease_of(&one.id)),
        (s::id("nobody"), LeaseId::generate()),
        (three.id.clone(), lease_of(&three.id)),
        (two.id.clone(), lease_of(&two.id)),
    ];
    let results = s::must(b.ack_many(&q, items).await, "ack_many");
    assert_eq!(results.len(), 4, "one result per item");
    s::must(results[0].clone(), "ack one");
    s::assert_not_found(results[1].clone(), "unknown id");
    s::assert_lease_mismatch(results[2].clone(), "superseded lease");
    s::must(results[3].clone(), "ack two");
    s::assert_not_found(b.get(&q, &one.id).await, "one after ack_many");
    s::assert_not_found(b.get(&q, &two.id).await, "two after ack_many");
    assert_eq!(get(&b, &q, &three.id).await.state, MessageState::Leased);
    s::must(b.ack(&q, &three.id, &again.lease_id).await, "ack three");

    let nowhere = s::queue("ack_many_items_independent", "missing");
    let results = s::must(
        b.ack_many(&nowhere, vec![(one.id.clone(), LeaseId::generate())])
            .await,
        "ack_many on an unknown queue",
    );
    s::assert_not_found(results[0].clone(), "unknown queue item");
}

/// `pipeline` runs calls in order, each as its own method would, and stops
/// after a lease that leased fewer than its `max` (the calls after it do
/// not run).
pub async fn pipeline_runs_in_order_and_stops_after_short_lease(b: Arc<dyn Broker>) {
    use crate::message::EnqueueOptions;
    use crate::pipeline::{PipelinedCall as C, PipelinedResult as R};
    let q = s::queue("pipeline_runs_in_order", "q");
    s::make_queue(&b, &q, 5).await;
    let now = |id: &str| s::req(Some(id), Schedule::Now, id);
    let mut calls = std::collections::VecDeque::from(vec![
        C::Enqueue {
            queue: q.clone(),
            messages: vec![now("a"), now("b"), now("c")],
            options: EnqueueOptions::default(),
        },
        C::Lease {
            queues: vec![q.clone()],
            max: 2,
            lease_ms: None,
        },
        C::Enqueue {
            queue: q.clone(),
            messages: vec![now("d")],
            options: EnqueueOptions::default(),
        },
    ]);
    let results = b.pipeline(&mut calls).await;
    assert_eq!(results.len(), 3, "a full lease does not stop the pipeline");
    assert!(calls.is_empty(), "every call ran");
    let R::Leased(Ok(leased)) = &results[1] else {
        panic!("lease result: {:?}", results[1]);
    };
    let ids: Vec<&str> = leased.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"], "the lease sees the enqueue before it");
    assert!(matches!(&results[2], R::Enqueued(Ok(items)) if items.len() == 1));

    let (a, b_) = (&leased[0], &leased[1]);
    // c and d become due strictly before b's nack makes it due again.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let mut calls = std::collections::VecDeque::from(vec![
        C::Ack {
            queue: q.clone(),
            id: a.id.clone(),
            lease: a.lease_id.clone(),
        },
        C::Nack {
            queue: q.clone(),
            id: b_.id.clone(),
            lease: b_.lease_id.clone(),
            nack: Nack {
                delay_ms: Some(0),
                ..Nack::default()
            },
        },
        C::Extend {
            queue: q.clone(),
            id: a.id.clone(),
            lease: a.lease_id.clone(),
            lease_ms: None,
        },
        C::Lease {
            queues: vec![q.clone()],
            max: 10,
            lease_ms: None,
        },
        C::Enqueue {
            queue: q.clone(),
            messages: vec![now("e")],
            options: EnqueueOptions::default(),
        },
    ]);
    let results = b.pipeline(&mut calls).await;
    assert_eq!(results.len(), 4, "stops after the short lease: {results:?}");
    assert_eq!(calls.len(), 1, "the enqueue after the stop is left");
    assert_eq!(results[0], R::Done(Ok(())), "ack");
    assert_eq!(results[1], R::Done(Ok(())), "nack");
    assert!(
        matches!(
            &results[2],
            R::Extended(Err(crate::BrokerError::MessageNotFound { .. }))
        ),
        "extend after ack: {:?}",
        results[2]
    );
    let R::Leased(Ok(leased)) = &results[3] else {
        panic!("lease result: {:?}", results[3]);
    };
    let ids: Vec<&str> = leased.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["c", "d", "b"], "(priority, deliver_at, seq) order");
    s::assert_not_found(b.get(&q, &s::id("e")).await, "the call after the stop");
}

/// A nack's `error` is the message's `last_error` (api.md, Consuming); a
/// nack without one leaves it as it was, a later one replaces it, and one
/// longer than `MAX_ERROR_BYTES` is refused without changing anything.
pub async fn nack_error_is_last_error(b: Arc<dyn Broker>) {
    let q = s::queue("nack_error_is_last_error", "q");
    s::make_queue(&b, &q, 10).await;
    let out = put_now(&b, &q, "m").await;
    assert_eq!(get(&b, &q, &out.id).await.last_error, None, "a new message");
    let nack_now = |error: Option<String>| Nack {
        delay_ms: Some(0),
        error,
        ..Nack::default()
    };

    let d = lease_one(&b, &q, None).await;
    let too_long = "é".repeat(crate::MAX_ERROR_BYTES / 2) + "x";
    match b
        .nack(&q, &out.id, &d.lease_id, nack_now(Some(too_long)))
        .await
    {
        Err(crate::BrokerError::InvalidArgument(text)) => {
            assert!(text.contains("error"), "names the field: {text}")
        }
        other => panic!("an error of 1025 bytes: {other:?}"),
    }
    let m = get(&b, &q, &out.id).await;
    assert_eq!(
        (m.state, m.last_error),
        (MessageState::Leased, None),
        "a refused nack changes nothing"
    );
    let longest = "é".repeat(crate::MAX_ERROR_BYTES / 2);
    s::must(
        b.nack(&q, &out.id, &d.lease_id, nack_now(Some(longest.clone())))
            .await,
        "nack with an error of 1024 bytes",
    );
    assert_eq!(get(&b, &q, &out.id).await.last_error, Some(longest.clone()));

    let d = lease_one(&b, &q, None).await;
    s::must(
        b.nack(&q, &out.id, &d.lease_id, nack_now(None)).await,
        "nack without error",
    );
    let m = get(&b, &q, &out.id).await;
    assert_eq!(
        (m.attempts, m.last_error),
        (2, Some(longest)),
        "a nack without error keeps the last one"
    );

    let d = lease_one(&b, &q, None).await;
    let text = "timeout calling billing: 504\nretry later".to_owned();
    s::must(
        b.nack(&q, &out.id, &d.lease_id, nack_now(Some(text.clone())))
            .await,
        "nack with another error",
    );
    assert_eq!(get(&b, &q, &out.id).await.last_error, Some(text));
}
