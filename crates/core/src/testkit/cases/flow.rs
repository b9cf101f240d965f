//! Flow control (api.md, "Flow control" and its precise rules), through the
//! `Broker` trait only. The cases run on real time (over HTTP, on Redis)
//! and on virtual time; their time bounds hold on both: a bound that a
//! broker must not exceed is checked against the widest span the
//! observations allow (a lease's call start to another's return), so a
//! slow machine never fails a correct broker.

use std::sync::Arc;
use std::time::Duration;

use crate::broker::Broker;
use crate::flow::{FlowConfig, FlowKey, Rate};
use crate::message::{Delivery, EnqueueRequest, MessageState, Nack, Schedule};
use crate::model::{QueueConfigPatch, QueueName};
use crate::recurring::ScheduleId;
use crate::testkit::support::{self as s, SLACK_MS};

use super::schedule_support::{every, put_schedule, sid};

fn key(k: &str) -> FlowKey {
    FlowKey::new(k).unwrap_or_else(|e| panic!("bad test key {k:?}: {e}"))
}

/// Creates `q` with a fast retry, `max_attempts` and `flow`.
async fn flow_queue(b: &Arc<dyn Broker>, q: &QueueName, max_attempts: u32, flow: FlowConfig) {
    let patch = QueueConfigPatch {
        max_attempts: Some(max_attempts),
        retry: Some(s::fast_retry()),
        flow: Some(Some(flow)),
        ..QueueConfigPatch::default()
    };
    s::must(b.put_queue(q, patch).await, "put_queue with flow");
}

/// Enqueues a ready message `id_` with flow key `k` (or none).
async fn put_key(b: &Arc<dyn Broker>, q: &QueueName, id_: &str, k: Option<&str>) {
    let request = EnqueueRequest {
        key: k.map(key),
        ..s::req(Some(id_), Schedule::Now, id_)
    };
    s::put(b, q, request).await;
}

fn ids(got: &[Delivery]) -> Vec<&str> {
    got.iter().map(|d| d.id.as_str()).collect()
}

async fn ack(b: &Arc<dyn Broker>, q: &QueueName, d: &Delivery) {
    s::must(b.ack(q, &d.id, &d.lease_id).await, "ack");
}

async fn defer(b: &Arc<dyn Broker>, q: &QueueName, d: &Delivery, delay_ms: Option<u64>) {
    let nack = Nack {
        delay_ms,
        defer: true,
        ..Nack::default()
    };
    s::must(b.nack(q, &d.id, &d.lease_id, nack).await, "nack defer");
}

/// A queue `rate` never starts more than `burst + floor(d * limit /
/// period_ms)` deliveries in any span of `d` ms, and keeps up with it;
/// held messages stay ready with no attempt spent.
pub async fn flow_rate_bound(b: Arc<dyn Broker>) {
    let q = s::queue("flow_rate_bound", "q");
    let rate = Rate {
        limit: 10,
        period_ms: 1_000,
        burst: 3,
    };
    let flow = FlowConfig {
        rate: Some(rate),
        ..FlowConfig::default()
    };
    flow_queue(&b, &q, 5, flow).await;
    for i in 0..40 {
        put_key(&b, &q, &format!("m{i:02}"), None).await;
    }
    // Each delivery: (the lease call's start, its return).
    let mut starts: Vec<(u64, u64)> = Vec::new();
    let began = s::now_ms();
    while s::now_ms() < began + 2_000 {
        let called = s::now_ms();
        let got = s::lease(&b, &q, 10, 300).await;
        let returned = s::now_ms();
        for d in &got {
            assert_eq!(d.attempt, 1, "a held message spends no attempt: {d:?}");
            starts.push((called, returned));
            ack(&b, &q, d).await;
        }
    }
    for (i, first) in starts.iter().enumerate() {
        for (j, last) in starts.iter().enumerate().skip(i) {
            // The real span is at most from the first's call to the last's
            // return.
            let widest = last.1.saturating_sub(first.0);
            let bound = u64::from(rate.burst) + widest * u64::from(rate.limit) / rate.period_ms;
            let count = (j - i + 1) as u64;
            assert!(
                count <= bound,
                "{count} deliveries within {widest} ms exceed the bound {bound}: {starts:?}"
            );
        }
    }
    let elapsed = s::now_ms() - began;
    let allowed = u64::from(rate.burst) + elapsed * u64::from(rate.limit) / rate.period_ms;
    assert!(
        starts.len() as u64 * 10 >= allowed * 6,
        "only {} deliveries in {elapsed} ms where {allowed} were allowed",
        starts.len()
    );
    let waiting = s::list_by_state(b.as_ref(), &q, 100).await;
    for (state, messages) in &waiting {
        for m in messages {
            assert!(
                *state == MessageState::Ready && m.attempts == 0,
                "a held-back message stays ready with no attempt: {m:?}"
            );
        }
    }
}

/// `concurrency` bounds the queue's leases, `key_concurrency` each key's;
/// an ack frees a slot and wakes a waiting lease.
pub async fn flow_concurrency_per_queue_and_key(b: Arc<dyn Broker>) {
    let q = s::queue("flow_concurrency_per_queue_and_key", "q");
    let flow = FlowConfig {
        concurrency: Some(3),
        key_concurrency: Some(1),
        ..FlowConfig::default()
    };
    flow_queue(&b, &q, 5, flow).await;
    for (id_, k) in [
        ("a1", "a"),
        ("a2", "a"),
        ("b1", "b"),
        ("b2", "b"),
        ("c1", "c"),
        ("d1", "d"),
    ] {
        put_key(&b, &q, id_, Some(k)).await;
    }
    put_key(&b, &q, "n1", None).await;
    let first = s::lease(&b, &q, 10, 0).await;
    assert_eq!(ids(&first), ["a1", "b1", "c1"], "one per key, three in all");
    assert!(
        s::lease(&b, &q, 10, 0).await.is_empty(),
        "queue slots taken"
    );
    let info = s::must(b.key_info(&q, &key("a")).await, "key_info");
    assert_eq!((info.ready, info.leased), (1, 1), "{info:?}");
    // A lease that waits is answered when a slot frees.
    let waiter = {
        let (b, q) = (b.clone(), q.clone());
        tokio::spawn(async move { s::lease(&b, &q, 10, 5_000).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let asked = s::now_ms();
    ack(&b, &q, &first[0]).await;
    let woken = waiter.await.expect("waiting lease");
    assert_eq!(ids(&woken), ["a2"], "the freed key's next message");
    assert!(
        s::now_ms() <= asked + SLACK_MS,
        "the waiting lease was answered late"
    );
    ack(&b, &q, &first[1]).await;
    let next = s::lease(&b, &q, 10, 0).await;
    assert_eq!(
        ids(&next),
        ["b2"],
        "key b's next; d1 and n1 wait for a slot"
    );
    for d in [&first[2], &woken[0], &next[0]] {
        ack(&b, &q, d).await;
    }
    let rest = s::lease(&b, &q, 10, 0).await;
    assert_eq!(
        ids(&rest),
        ["d1", "n1"],
        "a message without a key is limited by the queue"
    );
}

/// With `ordered`, a nacked message holds its key: no later message of the
/// key is delivered until it is delivered again and acked; other keys go
/// on.
pub async fn flow_ordered_holds_behind_nack(b: Arc<dyn Broker>) {
    let q = s::queue("flow_ordered_holds_behind_nack", "q");
    let flow = FlowConfig {
        ordered: true,
        ..FlowConfig::default()
    };
    flow_queue(&b, &q, 5, flow).await;
    for (id_, k) in [("k1", "k"), ("k2", "k"), ("k3", "k"), ("o1", "o")] {
        put_key(&b, &q, id_, Some(k)).await;
    }
    let got = s::lease(&b, &q, 10, 0).await;
    assert_eq!(ids(&got), ["k1", "o1"], "one message per ordered key");
    let nack = Nack {
        delay_ms: Some(300),
        ..Nack::default()
    };
    s::must(b.nack(&q, &got[0].id, &got[0].lease_id, nack).await, "nack");
    ack(&b, &q, &got[1]).await;
    assert!(
        s::lease(&b, &q, 10, 0).await.is_empty(),
        "k2 must wait behind the nacked k1"
    );
    let k2 = s::get(&b, &q, &s::id("k2")).await;
    assert_eq!((k2.state, k2.attempts), (MessageState::Ready, 0), "{k2:?}");
    let again = s::lease(&b, &q, 10, 2_000).await;
    assert_eq!(ids(&again), ["k1"], "the failed message is its key's next");
    assert_eq!(again[0].attempt, 2);
    ack(&b, &q, &again[0]).await;
    let k2 = s::lease(&b, &q, 10, 0).await;
    assert_eq!(ids(&k2), ["k2"], "then the key's order goes on");
}

/// With `ordered`, a message whose lease expired holds its key too.
pub async fn flow_ordered_holds_behind_expired_lease(b: Arc<dyn Broker>) {
    let q = s::queue("flow_ordered_holds_behind_expired_lease", "q");
    let flow = FlowConfig {
        ordered: true,
        ..FlowConfig::default()
    };
    flow_queue(&b, &q, 5, flow).await;
    put_key(&b, &q, "k1", Some("k")).await;
    put_key(&b, &q, "k2", Some("k")).await;
    let first = s::lease_for(&b, &q, 1, 0, Some(200)).await;
    assert_eq!(ids(&first), ["k1"]);
    // The lease runs out; k1 comes back after the backoff (100 ms), and
    // nothing of the key is delivered before it.
    let next = s::lease(&b, &q, 10, 3_000).await;
    assert_eq!(ids(&next), ["k1"], "the expired message is its key's next");
    assert_eq!(next[0].attempt, 2);
    ack(&b, &q, &next[0]).await;
    assert_eq!(ids(&s::lease(&b, &q, 10, 0).await), ["k2"]);
}

/// A nack with `defer` gives the attempt back, is due again after its
/// delay, and cools its key down until then; other keys go on. Without a
/// delay the backoff of the nth deferral applies. On a queue without
/// `flow`, `defer` is an invalid argument.
pub async fn flow_defer_by_nack(b: Arc<dyn Broker>) {
    let q = s::queue("flow_defer_by_nack", "q");
    flow_queue(&b, &q, 1, FlowConfig::default()).await;
    put_key(&b, &q, "k1", Some("k")).await;
    put_key(&b, &q, "k2", Some("k")).await;
    put_key(&b, &q, "o1", Some("o")).await;
    let first = s::lease(&b, &q, 1, 0).await;
    assert_eq!(ids(&first), ["k1"]);
    let deferred_at = s::now_ms();
    defer(&b, &q, &first[0], Some(400)).await;
    let k1 = s::get(&b, &q, &s::id("k1")).await;
    assert_eq!(k1.attempts, 0, "a deferral gives the attempt back: {k1:?}");
    assert!(k1.deliver_at >= deferred_at + 400, "{k1:?}");
    let info = s::must(b.key_info(&q, &key("k")).await, "key_info");
    let until = info.cooling_until.expect("the key cools down");
    assert!(until >= deferred_at + 400, "{info:?}");
    let others = s::lease(&b, &q, 10, 0).await;
    assert_eq!(ids(&others), ["o1"], "only the deferred key cools down");
    ack(&b, &q, &others[0]).await;
    let later = s::lease(&b, &q, 1, 3_000).await;
    let leased_at = s::now_ms();
    assert_eq!(later.len(), 1, "the key delivers again after its cooldown");
    assert!(
        leased_at >= until,
        "{} delivered at {leased_at}, before the cooldown's end {until}",
        later[0].id
    );
    assert_eq!(later[0].attempt, 1, "same attempt as the deferred delivery");
    // max_attempts 1: a plain nack would have killed it; a deferral did not.
    defer(&b, &q, &later[0], None).await;
    let m = s::get(&b, &q, &later[0].id).await;
    assert_ne!(m.state, MessageState::Dead, "{m:?}");

    let plain = s::queue("flow_defer_by_nack", "plain");
    s::make_queue(&b, &plain, 3).await;
    s::put_now(&b, &plain, "m").await;
    let d = s::lease_one(&b, &plain, None).await;
    let nack = Nack {
        defer: true,
        ..Nack::default()
    };
    let refused = b.nack(&plain, &d.id, &d.lease_id, nack).await;
    assert!(
        matches!(refused, Err(crate::BrokerError::InvalidArgument(_))),
        "defer on a queue without flow: {refused:?}"
    );
    ack(&b, &plain, &d).await;
}

/// A message deferred more than `max_deferrals` times in a row dies.
pub async fn flow_max_deferrals_dead(b: Arc<dyn Broker>) {
    let q = s::queue("flow_max_deferrals_dead", "q");
    let flow = FlowConfig {
        max_deferrals: 2,
        ..FlowConfig::default()
    };
    flow_queue(&b, &q, 5, flow).await;
    put_key(&b, &q, "m", None).await;
    for n in 1..=3 {
        let d = s::lease(&b, &q, 1, 3_000).await;
        assert_eq!(ids(&d), ["m"], "deferral {n}");
        defer(&b, &q, &d[0], Some(0)).await;
    }
    let m = s::get(&b, &q, &s::id("m")).await;
    assert_eq!(
        m.state,
        MessageState::Dead,
        "third deferral of 2 allowed: {m:?}"
    );
}

/// Changed limits apply to messages already waiting, and wake a waiting
/// lease.
pub async fn flow_limits_changed_while_waiting(b: Arc<dyn Broker>) {
    let q = s::queue("flow_limits_changed_while_waiting", "q");
    let flow = FlowConfig {
        concurrency: Some(1),
        ..FlowConfig::default()
    };
    flow_queue(&b, &q, 5, flow).await;
    put_key(&b, &q, "m1", None).await;
    put_key(&b, &q, "m2", None).await;
    let first = s::lease(&b, &q, 10, 0).await;
    assert_eq!(ids(&first), ["m1"]);
    let waiter = {
        let (b, q) = (b.clone(), q.clone());
        tokio::spawn(async move { s::lease(&b, &q, 10, 5_000).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let raised = FlowConfig {
        concurrency: Some(2),
        ..FlowConfig::default()
    };
    let patch = QueueConfigPatch {
        flow: Some(Some(raised)),
        ..QueueConfigPatch::default()
    };
    s::must(b.put_queue(&q, patch).await, "raise concurrency");
    let woken = waiter.await.expect("waiting lease");
    assert_eq!(
        ids(&woken),
        ["m2"],
        "the raised limit lets the waiting one out"
    );
    // Removing flow removes every limit.
    let none = QueueConfigPatch {
        flow: Some(None),
        ..QueueConfigPatch::default()
    };
    let (_, info) = s::must(b.put_queue(&q, none).await, "remove flow");
    assert_eq!(info.config.flow, None);
}

/// A key's state is forgotten once it is done: after its last message is
/// acked it answers zeros, and the queue counts no key.
pub async fn flow_key_state_forgotten(b: Arc<dyn Broker>) {
    let q = s::queue("flow_key_state_forgotten", "q");
    let flow = FlowConfig {
        key_concurrency: Some(1),
        ..FlowConfig::default()
    };
    flow_queue(&b, &q, 5, flow).await;
    put_key(&b, &q, "m1", Some("k")).await;
    let info = s::must(b.key_info(&q, &key("k")).await, "key_info");
    assert_eq!(
        (info.ready, info.scheduled, info.leased),
        (1, 0, 0),
        "{info:?}"
    );
    let queue = s::must(b.get_queue(&q).await, "get_queue");
    assert_eq!(queue.stats.flow_keys, 1, "{queue:?}");
    let d = s::lease(&b, &q, 1, 0).await;
    ack(&b, &q, &d[0]).await;
    let info = s::must(b.key_info(&q, &key("k")).await, "key_info");
    assert_eq!(
        (info.ready, info.leased, info.cooling_until),
        (0, 0, None),
        "{info:?}"
    );
    let queue = s::must(b.get_queue(&q).await, "get_queue");
    assert_eq!(
        queue.stats.flow_keys, 0,
        "a done key is forgotten: {queue:?}"
    );
    let never = s::must(b.key_info(&q, &key("never-seen")).await, "key_info");
    assert_eq!((never.ready, never.dead), (0, 0));
    let unknown = s::queue("flow_key_state_forgotten", "unknown");
    s::assert_queue_not_found(b.key_info(&unknown, &key("k")).await, "key_info");
}

/// A schedule's template `key` is every fire's message's key, and its
/// fires are limited like any message of the key.
pub async fn flow_schedule_template_key(b: Arc<dyn Broker>) {
    let q = s::queue("flow_schedule_template_key", "q");
    flow_queue(&b, &q, 5, FlowConfig::default()).await;
    let id: ScheduleId = sid("keyed");
    let mut definition = every(1_000, s::now_ms());
    definition.message.key = Some(key("tenant-7"));
    put_schedule(&b, &q, &id, definition).await;
    let got = s::lease(&b, &q, 1, 3_000).await;
    assert_eq!(got.len(), 1, "the schedule fired");
    assert_eq!(got[0].key, Some(key("tenant-7")), "{:?}", got[0]);
    let m = s::get(&b, &q, &got[0].id).await;
    assert_eq!(m.key, Some(key("tenant-7")));
    ack(&b, &q, &got[0]).await;
}
