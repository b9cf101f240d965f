//! Trait operations the HTTP API does not expose (beanstalkd's needs):
//! run through `conformance_tests_extended!` against Local, Redis and the
//! model, not over HTTP.

use std::sync::Arc;

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::message::{
    EnqueueOptions, LeaseRequest, ListQuery, MessageState, Nack, Redrive, Schedule,
};
use crate::model::{PushConfig, QueueConfigPatch, QueueName};
use crate::testkit::support::{self as s, get, lease, lease_one, put, put_now, req, SLACK_MS};

/// `get_by_seq` finds a message in whatever queue; an unused seq is `None`.
pub async fn get_by_seq_across_queues(b: Arc<dyn Broker>) {
    let q1 = s::queue("get_by_seq_across_queues", "one");
    let q2 = s::queue("get_by_seq_across_queues", "two");
    let a = put_now(&b, &q1, "a").await;
    let c = put_now(&b, &q2, "c").await;
    let found = s::must(b.get_by_seq(c.seq).await, "get_by_seq");
    let m = found.unwrap_or_else(|| panic!("seq {} not found", c.seq));
    assert_eq!((m.queue, m.id), (q2.clone(), c.id.clone()));
    let m = s::must(b.get_by_seq(a.seq).await, "get_by_seq").map(|m| m.queue);
    assert_eq!(m, Some(q1.clone()));
    assert_eq!(s::must(b.get_by_seq(u64::MAX).await, "unused seq"), None);
    s::must(b.cancel(&q2, &c.id).await, "cancel");
    assert_eq!(s::must(b.get_by_seq(c.seq).await, "cancelled"), None);
}

/// `lease_message` leases a scheduled, ready or dead message (attempts
/// counted); an already leased one is `InvalidState`.
pub async fn lease_message_in_each_state(b: Arc<dyn Broker>) {
    let q = s::queue("lease_message_in_each_state", "q");
    s::make_queue(&b, &q, 1).await;
    let dead = put_now(&b, &q, "dead").await;
    s::nack_times(&b, &q, &dead.id, 1).await;
    let ready = put_now(&b, &q, "ready").await;
    let sch = put(&b, &q, req(Some("sch"), Schedule::Delay(60_000), "s")).await;
    for (out, attempt) in [(&dead, 2), (&ready, 1), (&sch, 1)] {
        let before = s::now_ms();
        let d = s::must(
            b.lease_message(&q, &out.id, Some(5_000)).await,
            "lease_message",
        );
        assert_eq!((&d.id, d.attempt), (&out.id, attempt));
        assert!(d.lease_until >= before + 5_000);
        let m = get(&b, &q, &out.id).await;
        assert_eq!(m.state, MessageState::Leased);
        s::assert_invalid_state(
            b.lease_message(&q, &out.id, None).await,
            "lease_message of a leased message",
        );
        s::must(b.ack(&q, &out.id, &d.lease_id).await, "ack");
    }
    s::assert_not_found(b.lease_message(&q, &dead.id, None).await, "gone");
}

/// `bury` moves a leased message to dead now, with a new priority; it
/// needs the current lease.
pub async fn bury_moves_to_dead(b: Arc<dyn Broker>) {
    let q = s::queue("bury_moves_to_dead", "q");
    s::make_queue(&b, &q, 10).await;
    let out = put_now(&b, &q, "m").await;
    let d = lease_one(&b, &q, None).await;
    let wrong = crate::LeaseId("nope".into());
    s::assert_lease_mismatch(b.bury(&q, &out.id, &wrong, None).await, "bury");
    s::must(b.bury(&q, &out.id, &d.lease_id, Some(7)).await, "bury");
    let m = get(&b, &q, &out.id).await;
    assert_eq!(
        (m.state, m.priority, m.counters.buries),
        (MessageState::Dead, 7, 1)
    );
    assert!(m.died_at.is_some());
    s::assert_lease_mismatch(b.ack(&q, &out.id, &d.lease_id).await, "ack after bury");
}

/// One lease over several queues hands out by (priority, deliver_at, seq)
/// across them, skipping paused and unknown queues.
pub async fn multi_queue_lease_order(b: Arc<dyn Broker>) {
    let qa = s::queue("multi_queue_lease_order", "a");
    let qb = s::queue("multi_queue_lease_order", "b");
    let paused = s::queue("multi_queue_lease_order", "p");
    let unknown = s::queue("multi_queue_lease_order", "u");
    let base = s::now_ms() - 1_000;
    for (q, name, priority, offset) in [
        (&qa, "a1", 10, 0),
        (&qb, "b1", 5, 0),
        (&qa, "a2", 5, 10),
        (&paused, "p1", 0, 0),
        (&qb, "b2", 10, 0),
    ] {
        let mut r = req(Some(name), Schedule::At(base + offset), name);
        r.priority = Some(priority);
        put(&b, q, r).await;
    }
    s::must(b.pause(&paused, None).await, "pause");
    let queues = [qa.clone(), unknown.clone(), qb.clone(), paused.clone()];
    let request = LeaseRequest {
        max: 10,
        wait_ms: 0,
        lease_ms: None,
    };
    let got = s::must(b.lease(&queues, request).await, "lease");
    let order: Vec<_> = got
        .iter()
        .map(|d| (d.queue.clone(), d.id.to_string()))
        .collect();
    let expected: Vec<(QueueName, String)> = [(&qb, "b1"), (&qa, "a2"), (&qa, "a1"), (&qb, "b2")]
        .into_iter()
        .map(|(q, id)| (q.clone(), id.to_string()))
        .collect();
    assert_eq!(order, expected);
    s::assert_queue_not_found(b.get_queue(&unknown).await, "unknown queue created");
}

/// A timed pause ends by itself: a waiting lease gets the message once it
/// ends, not before.
pub async fn timed_pause_expires(b: Arc<dyn Broker>) {
    let q = s::queue("timed_pause_expires", "q");
    s::make_queue(&b, &q, 10).await;
    let until = s::now_ms() + 300;
    let info = s::must(b.pause(&q, Some(until)).await, "pause");
    assert!(info.paused);
    assert_eq!(info.paused_until, Some(until));
    put_now(&b, &q, "m").await;
    assert!(lease(&b, &q, 1, 0).await.is_empty(), "leased while paused");
    let got = lease(&b, &q, 1, 5_000).await;
    let at = s::now_ms();
    assert_eq!(got.len(), 1, "the pause must end by itself");
    assert!(
        at >= until,
        "leased {} ms before the pause ended",
        until - at
    );
    assert!(at <= until + SLACK_MS, "pause ended late");
    let info = s::must(b.get_queue(&q).await, "get_queue");
    assert!(!info.paused, "an expired pause is not paused");
}

fn page(state: MessageState, after: Option<&str>, limit: u32) -> ListQuery {
    ListQuery {
        state,
        after: after.map(s::id),
        limit,
    }
}

async fn list_ids(b: &Arc<dyn Broker>, q: &QueueName, query: ListQuery) -> Vec<String> {
    let got = s::must(b.list(q, query).await, "list");
    got.into_iter().map(|m| m.id.to_string()).collect()
}

/// `list` orders scheduled by (deliver_at, seq), ready by (priority,
/// deliver_at, seq), leased by (lease_until, seq), and pages with `after`.
pub async fn list_order_by_state(b: Arc<dyn Broker>) {
    let q = s::queue("list_order_by_state", "q");
    s::make_queue(&b, &q, 10).await;
    let now = s::now_ms();
    for (name, delay) in [("s1", 90_000), ("s2", 30_000), ("s3", 60_000)] {
        put(&b, &q, req(Some(name), Schedule::At(now + delay), name)).await;
    }
    for (name, priority) in [("r1", 9), ("r2", 3), ("r3", 9), ("r4", 1)] {
        let mut r = req(Some(name), Schedule::At(now - 1_000), name);
        r.priority = Some(priority);
        put(&b, &q, r).await;
    }
    let sch = list_ids(&b, &q, page(MessageState::Scheduled, None, 10)).await;
    assert_eq!(sch, ["s2", "s3", "s1"], "scheduled by deliver_at");
    let ready = list_ids(&b, &q, page(MessageState::Ready, None, 10)).await;
    assert_eq!(
        ready,
        ["r4", "r2", "r1", "r3"],
        "ready by priority, then seq"
    );
    let rest = list_ids(&b, &q, page(MessageState::Ready, Some("r2"), 2)).await;
    assert_eq!(rest, ["r1", "r3"], "ready page after r2");
    for (name, lease_ms) in [("r4", 50_000), ("r2", 20_000), ("r1", 40_000)] {
        let d = s::must(
            b.lease_message(&q, &s::id(name), Some(lease_ms)).await,
            "lease",
        );
        assert_eq!(d.id.as_str(), name);
    }
    let leased = list_ids(&b, &q, page(MessageState::Leased, None, 10)).await;
    assert_eq!(leased, ["r2", "r1", "r4"], "leased by lease_until");
    let tail = list_ids(&b, &q, page(MessageState::Leased, Some("r1"), 10)).await;
    assert_eq!(tail, ["r4"]);
}

/// Message counters count expiries (timeouts), nacks (releases), deaths
/// (buries) and redrives (kicks); `Nack { may_die: false }` never kills.
pub async fn counters_track_events(b: Arc<dyn Broker>) {
    let q = s::queue("counters_track_events", "q");
    s::make_queue(&b, &q, 2).await;
    let out = put_now(&b, &q, "m").await;
    lease_one(&b, &q, Some(100)).await;
    let d = lease_one(&b, &q, None).await;
    assert_eq!(d.attempt, 2, "expiry then redelivery");
    let keep = Nack {
        delay_ms: Some(0),
        priority: Some(3),
        may_die: false,
        defer: false,
        error: None,
        push: None,
    };
    s::must(
        b.nack(&q, &out.id, &d.lease_id, keep).await,
        "nack may_die=false",
    );
    let m = get(&b, &q, &out.id).await;
    assert_eq!(
        (m.state, m.priority),
        (MessageState::Ready, 3),
        "must not die"
    );
    let d = lease_one(&b, &q, None).await;
    s::must(
        b.nack(&q, &out.id, &d.lease_id, Nack::default()).await,
        "nack",
    );
    let m = get(&b, &q, &out.id).await;
    assert_eq!(m.state, MessageState::Dead);
    s::must(b.redrive(&q, Redrive::Oldest(5)).await, "kick");
    let c = get(&b, &q, &out.id).await.counters;
    assert_eq!((c.timeouts, c.releases, c.buries, c.kicks), (1, 2, 1, 1));
}

/// `ready_urgent` counts ready messages with priority below 1024.
pub async fn ready_urgent_counts(b: Arc<dyn Broker>) {
    let q = s::queue("ready_urgent_counts", "q");
    let items = [
        (0, Schedule::Now),
        (1023, Schedule::Now),
        (1024, Schedule::Now),
    ];
    let mut batch: Vec<_> = items
        .iter()
        .map(|(priority, schedule)| crate::EnqueueRequest {
            priority: Some(*priority),
            schedule: *schedule,
            ..crate::EnqueueRequest::default()
        })
        .collect();
    batch.push(crate::EnqueueRequest {
        priority: Some(1),
        schedule: Schedule::Delay(60_000),
        ..crate::EnqueueRequest::default()
    });
    s::must(
        b.enqueue(&q, batch, EnqueueOptions::default()).await,
        "enqueue",
    );
    let st = s::must(b.get_queue(&q).await, "get_queue").stats;
    assert_eq!((st.ready, st.ready_urgent, st.scheduled), (3, 2, 1));
}

/// After shutdown, calls fail `Unavailable` (and `ready()` reports it).
pub async fn calls_after_shutdown_unavailable(b: Arc<dyn Broker>) {
    let q = s::queue("calls_after_shutdown_unavailable", "q");
    put_now(&b, &q, "m").await;
    s::must(b.ready().await, "ready before shutdown");
    s::must(b.shutdown().await, "shutdown");
    let unavailable =
        |r: Result<(), BrokerError>| matches!(r, Err(BrokerError::Unavailable { .. }));
    assert!(unavailable(b.ready().await), "ready() after shutdown");
    let r = b
        .enqueue(
            &q,
            vec![req(None, Schedule::Now, "x")],
            EnqueueOptions::default(),
        )
        .await;
    assert!(unavailable(r.map(|_| ())), "enqueue after shutdown");
}

/// Deleting a queue makes a lease waiting on it return an empty list at
/// once (the trait's promise; HTTP clients cannot race this usefully).
pub async fn delete_queue_wakes_waiting_lease(b: Arc<dyn Broker>) {
    let q = s::queue("delete_queue_wakes_waiting_lease", "q");
    s::make_queue(&b, &q, 10).await;
    let waiter = {
        let (b, q) = (b.clone(), q.clone());
        tokio::spawn(async move {
            let got = lease(&b, &q, 1, 20_000).await;
            (got, tokio::time::Instant::now())
        })
    };
    // No event tells that the waiter is waiting; give it a head start.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let start = tokio::time::Instant::now();
    s::must(b.delete_queue(&q).await, "delete_queue");
    let (got, returned) = waiter.await.unwrap_or_else(|e| panic!("waiter: {e}"));
    assert!(got.is_empty(), "lease on a deleted queue gave {got:?}");
    let took = returned.saturating_duration_since(start).as_millis() as u64;
    assert!(
        took <= SLACK_MS,
        "waiting lease returned {took} ms after delete"
    );
}

/// `push` is replaced whole by a PUT that gives it and removed by
/// `Some(None)`; a PUT without it keeps it. (Extended only: over HTTP a
/// push URL must pass the server's allowlist.)
pub async fn queue_push_replaced_whole(b: Arc<dyn Broker>) {
    let q = s::queue("queue_push_replaced_whole", "q");
    let first = PushConfig {
        url: "http://127.0.0.1:9/a".into(),
        timeout_ms: 1_000,
        concurrency: 4,
        secret: Some("s3cret".into()),
        headers: [("authorization".to_owned(), "Bearer t".to_owned())].into(),
    };
    let patch = |push| QueueConfigPatch {
        push,
        ..QueueConfigPatch::default()
    };
    let (_, info) = s::must(b.put_queue(&q, patch(Some(Some(first)))).await, "create");
    assert_eq!(info.config.push.as_ref().map(|p| p.concurrency), Some(4));
    assert_eq!(
        info.config.push.as_ref().map(|p| p.headers.len()),
        Some(1),
        "push headers are stored"
    );
    let second = PushConfig {
        url: "http://127.0.0.1:9/b".into(),
        timeout_ms: 2_000,
        concurrency: 1,
        secret: None,
        headers: Default::default(),
    };
    let (_, info) = s::must(
        b.put_queue(&q, patch(Some(Some(second.clone())))).await,
        "swap",
    );
    assert_eq!(
        info.config.push,
        Some(second.clone()),
        "replaced whole, secret and headers too"
    );
    let (_, info) = s::must(b.put_queue(&q, patch(None)).await, "keep");
    assert_eq!(info.config.push, Some(second), "absent push is kept");
    let (_, info) = s::must(b.put_queue(&q, patch(Some(None))).await, "remove");
    assert_eq!(info.config.push, None);
}

/// The argument rules live in core and every broker applies them: lease
/// `max` within 1..=MAX_BATCH, and no zero-length lease in `lease`,
/// `lease_message` or `extend`. Nothing changes on a refused call.
pub async fn argument_rules_are_the_same_everywhere(b: Arc<dyn Broker>) {
    use crate::message::LeaseRequest;
    let q = s::queue("argument_rules", "q");
    s::make_queue(&b, &q, 5).await;
    let out = s::put_now(&b, &q, "m").await;
    let refused =
        |r: &crate::BrokerResult<_>| matches!(r, Err(crate::BrokerError::InvalidArgument(_)));
    for (max, lease_ms) in [(0, None), (crate::MAX_BATCH as u32 + 1, None), (1, Some(0))] {
        let request = LeaseRequest {
            max,
            wait_ms: 0,
            lease_ms,
        };
        let r = b.lease(std::slice::from_ref(&q), request).await.map(|_| ());
        assert!(refused(&r), "lease max {max} lease_ms {lease_ms:?}: {r:?}");
    }
    let r = b.lease_message(&q, &out.id, Some(0)).await.map(|_| ());
    assert!(refused(&r), "lease_message lease_ms 0: {r:?}");
    assert_eq!(s::get(&b, &q, &out.id).await.state, MessageState::Ready);
    let d = s::lease_one(&b, &q, None).await;
    let r = b.extend(&q, &d.id, &d.lease_id, Some(0)).await.map(|_| ());
    assert!(refused(&r), "extend lease_ms 0: {r:?}");
    let full = LeaseRequest {
        max: crate::MAX_BATCH as u32,
        wait_ms: 0,
        lease_ms: None,
    };
    s::must(
        b.lease(std::slice::from_ref(&q), full).await,
        "max = MAX_BATCH",
    );
    s::must(b.ack(&q, &d.id, &d.lease_id).await, "ack");
    enqueue_item_rules(&b, &q).await;
    deliver_at_rule(&b, &q).await;
}

/// A due time past `MAX_DELIVER_AT` is refused (`check_deliver_at`): the
/// enqueue item alone, and a reschedule without changing the message.
async fn deliver_at_rule(b: &Arc<dyn Broker>, q: &crate::QueueName) {
    use crate::message::{EnqueueRequest, Reschedule, Schedule};
    let too_far = Schedule::At(crate::MAX_DELIVER_AT + 1);
    let item = EnqueueRequest {
        id: Some(s::id("too-far")),
        schedule: too_far,
        ..EnqueueRequest::default()
    };
    let results = s::must(
        b.enqueue(q, vec![item], crate::EnqueueOptions::default())
            .await,
        "enqueue",
    );
    assert!(
        matches!(results[0], Err(crate::BrokerError::InvalidArgument(_))),
        "deliver_at past MAX_DELIVER_AT: {:?}",
        results[0]
    );
    let kept = s::put_now(b, q, "kept").await;
    let change = Reschedule {
        schedule: Some(too_far),
        priority: Some(1),
    };
    let r = b.reschedule(q, &kept.id, change).await.map(|_| ());
    assert!(
        matches!(r, Err(crate::BrokerError::InvalidArgument(_))),
        "reschedule past MAX_DELIVER_AT: {r:?}"
    );
    let after = s::get(b, q, &kept.id).await;
    assert_eq!(after.state, MessageState::Ready, "{after:?}");
    assert_eq!(after.priority, crate::DEFAULT_PRIORITY, "{after:?}");
}

/// An enqueue item asking for zero deliveries or a zero-length lease is
/// refused alone (`EnqueueRequest::validate`); the valid item beside it is
/// stored and the refused ids stay free.
async fn enqueue_item_rules(b: &Arc<dyn Broker>, q: &crate::QueueName) {
    use crate::message::EnqueueRequest;
    let item = |id: &str, max_attempts, lease_ms| EnqueueRequest {
        id: Some(s::id(id)),
        max_attempts,
        lease_ms,
        ..EnqueueRequest::default()
    };
    let batch = vec![
        item("zero-attempts", Some(0), None),
        item("zero-lease", None, Some(0)),
        item("fine", Some(1), Some(1)),
    ];
    let results = s::must(
        b.enqueue(q, batch, crate::EnqueueOptions::default()).await,
        "enqueue",
    );
    for (i, what) in [(0, "max_attempts 0"), (1, "lease_ms 0")] {
        assert!(
            matches!(results[i], Err(crate::BrokerError::InvalidArgument(_))),
            "{what}: expected InvalidArgument, got {:?}",
            results[i]
        );
    }
    s::must(results[2].clone(), "the valid item beside them");
    for id in ["zero-attempts", "zero-lease"] {
        let r = b.get(q, &s::id(id)).await;
        assert!(
            matches!(r, Err(crate::BrokerError::MessageNotFound { .. })),
            "refused item {id} must not be stored: {r:?}"
        );
    }
}
