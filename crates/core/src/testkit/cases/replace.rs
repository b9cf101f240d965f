//! Replace and debounce by id (api.md, "Retention, replace and
//! debounce"): `on_conflict` on an enqueue whose id names a live message.
//! A waiting message takes the request's content and due time at once; a
//! leased one keeps the request as its successor, applied when its lease
//! ends (after an ack as a new message, after a retry as its content and
//! the later due time, after a death in its place).
//!
//! Due times are given as absolute times (`Schedule::At`) and checked
//! against the broker's clock read around each call, so no case depends on
//! the machine's speed.

use std::sync::Arc;
use std::time::Duration;

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::events::EventKind;
use crate::flow::{FlowConfig, FlowKey};
use crate::message::{
    EnqueueOptions, EnqueueOutcome, EnqueueRequest, MessageState, Nack, OnConflict, Schedule,
};
use crate::model::{MessageId, QueueConfigPatch, QueueName};
use crate::testkit::support::{self as s, get, lease, lease_one, put, put_now, req};

/// A request for `id` with `on_conflict`, due at `at`.
fn conflicting(id: &str, on_conflict: OnConflict, at: u64, payload: &str) -> EnqueueRequest {
    EnqueueRequest {
        on_conflict,
        ..req(Some(id), Schedule::At(at), payload)
    }
}

fn debounce(id: &str, at: u64, max_ms: Option<u64>, payload: &str) -> EnqueueRequest {
    EnqueueRequest {
        debounce_max_ms: max_ms,
        ..conflicting(id, OnConflict::Debounce, at, payload)
    }
}

async fn event_names(b: &Arc<dyn Broker>, q: &QueueName, id: &MessageId) -> Vec<EventKind> {
    let h = s::must(b.events(q, id).await, "events");
    h.events.into_iter().map(|e| e.kind).collect()
}

/// A nack that schedules the message again after `delay_ms`.
fn nack_after(delay_ms: u64) -> Nack {
    Nack {
        delay_ms: Some(delay_ms),
        ..Nack::default()
    }
}

fn payload_of(m: &crate::message::Message) -> String {
    String::from_utf8_lossy(&m.payload).into_owned()
}

/// `replace` of a scheduled and of a ready message: the request's
/// payload, headers, priority, key, max_attempts and due time, the
/// message's seq, attempts and enqueued_at kept, a `replaced` event;
/// `keep` stays a duplicate that changes nothing; a replace due now makes
/// the message ready at once; batch items replace in order.
pub async fn replace_waiting_messages(b: Arc<dyn Broker>) {
    let q = s::queue("replace_waiting_messages", "q");
    let t0 = s::now_ms();
    let first = put(&b, &q, req(Some("m"), Schedule::At(t0 + 60_000), "old")).await;
    let before = get(&b, &q, &first.id).await;

    let mut r = conflicting("m", OnConflict::Replace, t0 + 120_000, "new");
    r.priority = Some(5);
    r.headers.insert("h".into(), "v".into());
    r.key = Some(FlowKey::new("k").expect("key"));
    r.max_attempts = Some(3);
    let out = put(&b, &q, r).await;
    let expected = EnqueueOutcome::replaced(first.id.clone(), first.seq, t0 + 120_000, false);
    assert_eq!(out, expected, "a replace answers the message's seq");
    let m = get(&b, &q, &first.id).await;
    assert_eq!(payload_of(&m), "new");
    assert_eq!(
        (m.priority, m.max_attempts, m.deliver_at, m.state),
        (5, Some(3), t0 + 120_000, MessageState::Scheduled)
    );
    assert_eq!(m.headers.get("h").map(String::as_str), Some("v"));
    assert_eq!(m.key.as_ref().map(|k| k.as_str()), Some("k"));
    assert_eq!(
        (m.seq, m.attempts, m.enqueued_at),
        (before.seq, 0, before.enqueued_at),
        "seq, attempts and enqueued_at stay"
    );

    let keep = put(&b, &q, req(Some("m"), Schedule::Now, "keep")).await;
    assert_eq!(
        keep,
        EnqueueOutcome::duplicate(first.id.clone(), first.seq, t0 + 120_000),
        "keep is a duplicate"
    );
    assert_eq!(payload_of(&get(&b, &q, &first.id).await), "new");

    let t = s::now_ms();
    let out = put(&b, &q, conflicting("m", OnConflict::Replace, t, "now")).await;
    assert!(out.replaced && !out.after_lease && !out.created);
    let d = lease_one(&b, &q, None).await;
    assert_eq!((d.seq, d.attempt), (first.seq, 1));
    assert_eq!(String::from_utf8_lossy(&d.payload), "now");
    s::must(b.ack(&q, &d.id, &d.lease_id).await, "ack");

    let ready = put_now(&b, &q, "r").await;
    let later = s::now_ms() + 60_000;
    let batch = vec![
        conflicting("r", OnConflict::Replace, later, "b1"),
        conflicting("r", OnConflict::Replace, later + 1, "b2"),
    ];
    let results = s::must(
        b.enqueue(&q, batch, EnqueueOptions::default()).await,
        "batch",
    );
    let results: Vec<_> = results
        .into_iter()
        .map(|r| s::must(r, "batch item"))
        .collect();
    assert!(results.iter().all(|o| o.replaced && o.seq == ready.seq));
    assert_eq!(results[1].deliver_at, later + 1);
    let m = get(&b, &q, &ready.id).await;
    assert_eq!(payload_of(&m), "b2", "batch items apply in order");
    assert_eq!(
        m.state,
        MessageState::Scheduled,
        "a ready message waits again"
    );
    assert!(lease(&b, &q, 10, 0).await.is_empty());
    assert_eq!(
        event_names(&b, &q, &ready.id).await,
        [
            EventKind::Enqueued,
            EventKind::Replaced { after_lease: false },
            EventKind::Replaced { after_lease: false },
        ]
    );
}

/// `debounce` takes the request's due time capped at the message's
/// `enqueued_at + debounce_max_ms` (also the request that creates it),
/// uncapped without it; each request's
/// content replaces the last, so a stream of events gives one delivery
/// with the last event's payload.
pub async fn debounce_caps_at_max(b: Arc<dyn Broker>) {
    let q = s::queue("debounce_caps_at_max", "q");
    let t0 = s::now_ms();
    let first = put(&b, &q, debounce("d", t0 + 10_000, Some(15_000), "e1")).await;
    assert!(first.created, "the first debounce creates the message");
    let enqueued_at = get(&b, &q, &first.id).await.enqueued_at;

    let out = put(&b, &q, debounce("d", t0 + 20_000, Some(15_000), "e2")).await;
    let capped = (t0 + 20_000).min(enqueued_at + 15_000);
    assert_eq!(
        out,
        EnqueueOutcome::replaced(first.id.clone(), first.seq, capped, false)
    );
    let out = put(&b, &q, debounce("d", t0 + 12_000, Some(15_000), "e3")).await;
    assert_eq!(out.deliver_at, (t0 + 12_000).min(enqueued_at + 15_000));
    let out = put(&b, &q, debounce("d", t0 + 100_000, None, "e4")).await;
    assert_eq!(
        out.deliver_at,
        t0 + 100_000,
        "no cap without debounce_max_ms"
    );
    let m = get(&b, &q, &first.id).await;
    assert_eq!((payload_of(&m), m.deliver_at), ("e4".into(), t0 + 100_000));

    // A debounce that creates its message is capped too (from its
    // enqueued_at, the call's time).
    let far = put(&b, &q, debounce("new", t0 + 100_000, Some(15_000), "n1")).await;
    let created_at = get(&b, &q, &far.id).await.enqueued_at;
    assert!(far.created);
    assert_eq!(
        far.deliver_at,
        (t0 + 100_000).min(created_at + 15_000),
        "capped at creation"
    );
    s::must(b.cancel(&q, &far.id).await, "cancel");

    // Due already: capped in the past, it is ready and delivered once.
    let out = put(&b, &q, debounce("d", t0 + 100_000, Some(0), "e5")).await;
    assert_eq!(out.deliver_at, enqueued_at);
    let d = lease_one(&b, &q, None).await;
    assert_eq!(String::from_utf8_lossy(&d.payload), "e5");
    s::must(b.ack(&q, &d.id, &d.lease_id).await, "ack");
    assert!(lease(&b, &q, 10, 0).await.is_empty(), "one delivery");
}

/// A replace of a leased message is its successor (`after_lease`, the
/// successor's due time answered); the leased message is not changed; a
/// later replace or debounce overwrites the successor; after the ack the
/// successor is a new message with the id (a new seq, enqueued now).
pub async fn successor_after_ack(b: Arc<dyn Broker>) {
    let q = s::queue("successor_after_ack", "q");
    let first = put_now(&b, &q, "m").await;
    let d = lease_one(&b, &q, None).await;
    let t = s::now_ms();
    let out = put(&b, &q, conflicting("m", OnConflict::Replace, t + 50, "v2")).await;
    assert_eq!(
        out,
        EnqueueOutcome::replaced(first.id.clone(), first.seq, t + 50, true),
        "the successor of a leased message"
    );
    let m = get(&b, &q, &first.id).await;
    assert_eq!(
        (m.state, payload_of(&m)),
        (MessageState::Leased, "m".into()),
        "a leased message is not changed"
    );
    let out = put(&b, &q, debounce("m", t + 60, None, "v3")).await;
    assert_eq!((out.deliver_at, out.after_lease), (t + 60, true));
    assert_eq!(
        event_names(&b, &q, &first.id).await,
        [
            EventKind::Enqueued,
            EventKind::Leased {
                lease_until: d.lease_until,
                via: crate::events::Via::Http
            },
            EventKind::Replaced { after_lease: true },
            EventKind::Replaced { after_lease: true },
        ]
    );
    let before_ack = s::now_ms();
    s::must(b.ack(&q, &d.id, &d.lease_id).await, "ack");
    let m = get(&b, &q, &first.id).await;
    assert!(m.seq > first.seq, "a new message, a new seq: {m:?}");
    assert!(m.enqueued_at >= before_ack, "enqueued at the ack: {m:?}");
    assert_eq!(
        (payload_of(&m), m.attempts, m.deliver_at),
        ("v3".into(), 0, t + 60)
    );
    assert_eq!(event_names(&b, &q, &first.id).await, [EventKind::Enqueued]);
    let d = lease_one(&b, &q, None).await;
    assert_eq!((d.seq, d.attempt), (m.seq, 1));
    assert_eq!(String::from_utf8_lossy(&d.payload), "v3");
    s::must(b.ack(&q, &d.id, &d.lease_id).await, "ack the successor");
    s::assert_not_found(b.get(&q, &first.id).await, "the id ends with it");
    assert!(lease(&b, &q, 10, 0).await.is_empty(), "nothing else");
}

/// After a retry (nack, expiry) the message takes its successor's content
/// and is due at the later of its retry time and the successor's due
/// time; its seq and attempts stay.
pub async fn successor_after_nack_and_expiry(b: Arc<dyn Broker>) {
    let q = s::queue("successor_after_nack_and_expiry", "q");
    s::make_queue(&b, &q, 10).await;
    let first = put_now(&b, &q, "m").await;
    let d = lease_one(&b, &q, None).await;
    let t = s::now_ms();
    put(&b, &q, conflicting("m", OnConflict::Replace, t, "v2")).await;
    s::must(b.nack(&q, &d.id, &d.lease_id, nack_after(0)).await, "nack");
    let m = get(&b, &q, &first.id).await;
    assert_eq!(
        (payload_of(&m), m.seq, m.attempts),
        ("v2".into(), first.seq, 1)
    );
    assert_eq!(
        m.state,
        MessageState::Ready,
        "due: the later of both is now"
    );
    let d = lease_one(&b, &q, None).await;
    assert_eq!(
        (String::from_utf8_lossy(&d.payload).as_ref(), d.attempt),
        ("v2", 2)
    );

    // A successor due later than the retry: the message waits for it.
    let t = s::now_ms();
    let out = put(&b, &q, conflicting("m", OnConflict::Replace, t + 300, "v3")).await;
    s::must(b.nack(&q, &d.id, &d.lease_id, nack_after(0)).await, "nack");
    let after_nack = s::now_ms();
    let m = get(&b, &q, &first.id).await;
    assert_eq!(payload_of(&m), "v3");
    assert!(
        m.deliver_at == out.deliver_at
            || (m.deliver_at > out.deliver_at && m.deliver_at <= after_nack),
        "due at the later of the retry and the successor: {} vs {}",
        m.deliver_at,
        out.deliver_at
    );
    let d = lease_one(&b, &q, Some(200)).await;
    assert_eq!(
        (String::from_utf8_lossy(&d.payload).as_ref(), d.attempt),
        ("v3", 3)
    );
    assert!(
        s::now_ms() >= out.deliver_at,
        "not before the successor's time"
    );

    // Expiry: the lease runs out with a successor waiting.
    let t = s::now_ms();
    put(&b, &q, conflicting("m", OnConflict::Replace, t, "v4")).await;
    tokio::time::sleep(Duration::from_millis(250)).await;
    let m = get(&b, &q, &first.id).await;
    assert_ne!(m.state, MessageState::Leased, "expired: {m:?}");
    assert_eq!(
        (payload_of(&m), m.attempts, m.seq),
        ("v4".into(), 3, first.seq)
    );
    let d = lease_one(&b, &q, None).await;
    assert_eq!(
        (String::from_utf8_lossy(&d.payload).as_ref(), d.attempt),
        ("v4", 4)
    );
    s::must(b.ack(&q, &d.id, &d.lease_id).await, "ack");
    s::assert_not_found(b.get(&q, &first.id).await, "acked, no successor left");
}

/// A deferral is a retry too: the successor's content, due at the later
/// of the deferral's time and the successor's.
pub async fn successor_after_deferral(b: Arc<dyn Broker>) {
    let q = s::queue("successor_after_deferral", "q");
    let patch = QueueConfigPatch {
        retry: Some(s::fast_retry()),
        flow: Some(Some(FlowConfig::default())),
        ..QueueConfigPatch::default()
    };
    s::must(b.put_queue(&q, patch).await, "put_queue");
    let first = put_now(&b, &q, "m").await;
    let d = lease_one(&b, &q, None).await;
    let t = s::now_ms();
    let out = put(&b, &q, conflicting("m", OnConflict::Replace, t + 200, "v2")).await;
    let defer = Nack {
        defer: true,
        delay_ms: Some(50),
        ..Nack::default()
    };
    s::must(b.nack(&q, &d.id, &d.lease_id, defer).await, "defer");
    let m = get(&b, &q, &first.id).await;
    assert_eq!((payload_of(&m), m.attempts), ("v2".into(), 0));
    assert!(m.deliver_at >= out.deliver_at, "{m:?}");
    let d = lease_one(&b, &q, None).await;
    assert_eq!(String::from_utf8_lossy(&d.payload), "v2");
    assert!(s::now_ms() >= out.deliver_at);
}

/// After a death (max_attempts) the successor takes the message's place:
/// scheduled again with its content and due time, attempts 0 (`dead`,
/// then `redriven`). A cancel drops the successor with the message.
pub async fn successor_after_death_and_cancel(b: Arc<dyn Broker>) {
    let q = s::queue("successor_after_death_and_cancel", "q");
    s::make_queue(&b, &q, 1).await;
    let first = put_now(&b, &q, "m").await;
    let d = lease_one(&b, &q, None).await;
    let t = s::now_ms();
    put(&b, &q, conflicting("m", OnConflict::Replace, t, "v2")).await;
    s::must(
        b.nack(&q, &d.id, &d.lease_id, nack_after(0)).await,
        "nack into death",
    );
    let m = get(&b, &q, &first.id).await;
    assert_eq!(
        (m.state, m.attempts, m.died_at, payload_of(&m), m.seq),
        (MessageState::Ready, 0, None, "v2".into(), first.seq),
        "the successor takes the dead message's place"
    );
    let names = event_names(&b, &q, &first.id).await;
    assert_eq!(
        names[names.len() - 3..]
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>(),
        ["nacked", "dead", "redriven"]
    );
    let d = lease_one(&b, &q, None).await;
    assert_eq!(
        (String::from_utf8_lossy(&d.payload).as_ref(), d.attempt),
        ("v2", 1)
    );

    put(&b, &q, conflicting("m", OnConflict::Replace, t, "v3")).await;
    s::must(b.cancel(&q, &first.id).await, "cancel");
    s::assert_not_found(b.get(&q, &first.id).await, "cancelled");
    assert!(
        lease(&b, &q, 10, 0).await.is_empty(),
        "the successor went too"
    );
    assert!(put_now(&b, &q, "m").await.created, "the id is free");
}

/// A dead message is not replaced (409 `invalid_state`); a retained id is
/// a duplicate for `keep` only, `replace` enqueues a new message; a
/// `debounce_max_ms` without debounce and an `on_conflict` without an id
/// are refused naming the field, an invalid batch item alone.
pub async fn replace_dead_retained_and_bad_input(b: Arc<dyn Broker>) {
    let q = s::queue("replace_dead_retained_and_bad_input", "q");
    let patch = QueueConfigPatch {
        max_attempts: Some(1),
        retry: Some(s::fast_retry()),
        retain_ms: Some(3_600_000),
        ..QueueConfigPatch::default()
    };
    s::must(b.put_queue(&q, patch).await, "put_queue");
    let dead = put_now(&b, &q, "dead").await;
    s::nack_times(&b, &q, &dead.id, 1).await;
    let now = s::now_ms();
    for on_conflict in [OnConflict::Replace, OnConflict::Debounce] {
        let r = conflicting("dead", on_conflict, now, "x");
        let result = b.enqueue(&q, vec![r], EnqueueOptions::default()).await;
        let item = s::must(result, "enqueue").remove(0);
        s::assert_invalid_state(item, "replace of a dead message");
    }
    let keep = put(&b, &q, req(Some("dead"), Schedule::Now, "x")).await;
    assert!(!keep.created && !keep.replaced);
    assert_eq!(get(&b, &q, &dead.id).await.state, MessageState::Dead);

    let acked = put_now(&b, &q, "acked").await;
    let d = lease_one(&b, &q, None).await;
    s::must(b.ack(&q, &d.id, &d.lease_id).await, "ack");
    let keep = put(&b, &q, req(Some("acked"), Schedule::Now, "x")).await;
    assert!(!keep.created, "a retained id is a duplicate for keep");
    let out = put(
        &b,
        &q,
        conflicting("acked", OnConflict::Replace, now, "new"),
    )
    .await;
    assert!(
        out.created && !out.replaced,
        "replace of a retained id: {out:?}"
    );
    assert!(out.seq > acked.seq);
    let m = get(&b, &q, &acked.id).await;
    assert_eq!(
        (m.state, payload_of(&m)),
        (MessageState::Ready, "new".into())
    );

    let bad_max = EnqueueRequest {
        debounce_max_ms: Some(1_000),
        ..conflicting("x", OnConflict::Replace, now, "x")
    };
    let no_id = EnqueueRequest {
        on_conflict: OnConflict::Debounce,
        ..req(None, Schedule::Now, "x")
    };
    let good = req(Some("good"), Schedule::Now, "x");
    let results = s::must(
        b.enqueue(&q, vec![bad_max, no_id, good], EnqueueOptions::default())
            .await,
        "batch",
    );
    let mut results = results.into_iter();
    for field in ["debounce_max_ms", "on_conflict"] {
        match results.next() {
            Some(Err(BrokerError::InvalidArgument(text))) => {
                assert!(text.contains(field), "names {field}: {text}");
            }
            other => panic!("{field}: expected InvalidArgument, got {other:?}"),
        }
    }
    let good = results.next().expect("the good item");
    assert!(
        s::must(good, "good item").created,
        "an invalid item fails alone"
    );
}

/// With `flow.ordered`, a replace that moves a message holding its key
/// (delivered before and back) onto a key that has a holder gives that
/// key two holders: the first of them in delivery order holds it (api.md:
/// the holder goes first whatever its state), and once it is done the
/// other holds it again.
pub async fn replace_moves_a_holder_onto_a_held_key(b: Arc<dyn Broker>) {
    let q = s::queue("replace_moves_a_holder_onto_a_held_key", "q");
    let patch = QueueConfigPatch {
        retry: Some(s::fast_retry()),
        flow: Some(Some(FlowConfig {
            key_concurrency: Some(1),
            ordered: true,
            ..FlowConfig::default()
        })),
        ..QueueConfigPatch::default()
    };
    s::must(b.put_queue(&q, patch).await, "put_queue");
    let keyed = |id: &str, key: &str, at: u64| EnqueueRequest {
        key: Some(FlowKey::new(key).expect("key")),
        ..req(Some(id), Schedule::At(at), id)
    };
    let t = s::now_ms();
    let nack = nack_after;
    // a holds k1 (back at once), b holds k2 (back in a minute).
    put(&b, &q, keyed("a", "k1", t)).await;
    put(&b, &q, keyed("b", "k2", t)).await;
    let mut d = lease(&b, &q, 10, 1_000).await;
    d.sort_by(|x, y| x.id.as_str().cmp(y.id.as_str()));
    assert_eq!(
        d.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    s::must(
        b.nack(&q, &d[0].id, &d[0].lease_id, nack(0)).await,
        "nack a",
    );
    s::must(
        b.nack(&q, &d[1].id, &d[1].lease_id, nack(60_000)).await,
        "nack b",
    );
    // c waits behind k2's holder.
    put(&b, &q, keyed("c", "k2", t)).await;
    // a moves onto k2, due now: the first of k2's two holders in delivery
    // order (b is due in a minute), so it goes; c still waits.
    let mut moved = keyed("a", "k2", s::now_ms());
    moved.on_conflict = OnConflict::Replace;
    let out = put(&b, &q, moved).await;
    assert!(out.replaced && !out.after_lease, "{out:?}");
    let d = lease(&b, &q, 10, 0).await;
    assert_eq!(
        d.iter()
            .map(|d| (d.id.as_str(), d.attempt))
            .collect::<Vec<_>>(),
        [("a", 2)],
        "a, the first of k2's holders, goes alone"
    );
    s::must(b.ack(&q, &d[0].id, &d[0].lease_id).await, "ack a");
    assert!(
        lease(&b, &q, 10, 0).await.is_empty(),
        "b holds k2 again while it waits: c stays behind it"
    );
}
