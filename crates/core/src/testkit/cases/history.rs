//! Message history (api.md, "Message history"): every transition appends
//! an event; a message keeps its last 32 and counts the dropped ones; the
//! history lives and ends with the message (and its retention).
//!
//! Times are checked against the broker's clock read around each call, so
//! no case depends on the machine's speed.

use std::sync::Arc;
use std::time::Duration;

use crate::broker::Broker;
use crate::events::{
    DeathReason, DeferReason, Event, EventKind, History, PushFailure, Via, HISTORY_LEN,
};
use crate::flow::FlowConfig;
use crate::message::{EnqueueOptions, LeaseRequest, Nack, Redrive, Reschedule, Schedule};
use crate::model::{MessageId, QueueConfigPatch, QueueName};
use crate::testkit::support::{self as s, lease_one, put, put_now, req};

async fn events(b: &Arc<dyn Broker>, q: &QueueName, id: &MessageId) -> History {
    s::must(b.events(q, id).await, "events")
}

fn names(h: &History) -> Vec<&'static str> {
    h.events.iter().map(|e| e.kind.name()).collect()
}

/// The last event, checked to have happened within `[from, to]`.
fn last_within(h: &History, from: u64, to: u64) -> &Event {
    let e = h.events.last().expect("an event");
    assert!(
        e.at >= from && e.at <= to,
        "{} at {} not within its call [{from}, {to}]",
        e.kind.name(),
        e.at
    );
    e
}

async fn queue_with(b: &Arc<dyn Broker>, q: &QueueName, patch: QueueConfigPatch) {
    let patch = QueueConfigPatch {
        retry: Some(s::fast_retry()),
        ..patch
    };
    s::must(b.put_queue(q, patch).await, "put_queue");
}

/// A message's life in events: enqueued, rescheduled, leased (via http,
/// its lease_until), nacked (delay and error), leased again, nacked into
/// death (nacked then dead: max_attempts), redriven, leased, acked; with
/// retention the history stays readable after the ack. Each event's
/// `attempt` is the message's attempt after it, its `at` within its call;
/// an unknown id is `MessageNotFound`, and so is an ended message without
/// retention.
pub async fn history_of_a_life(b: Arc<dyn Broker>) {
    let q = s::queue("history_of_a_life", "q");
    let patch = QueueConfigPatch {
        max_attempts: Some(2),
        retain_ms: Some(3_600_000),
        ..QueueConfigPatch::default()
    };
    queue_with(&b, &q, patch).await;
    let t0 = s::now_ms();
    let m = put(&b, &q, req(Some("m"), Schedule::Delay(60_000), "x")).await;
    let h = events(&b, &q, &m.id).await;
    assert_eq!(names(&h), ["enqueued"]);
    assert_eq!(h.dropped, 0);
    let e = last_within(&h, t0, s::now_ms());
    assert_eq!(e.attempt, 0);

    let t = s::now_ms();
    let change = Reschedule {
        schedule: Some(Schedule::Now),
        priority: None,
    };
    s::must(b.reschedule(&q, &m.id, change).await, "reschedule");
    let h = events(&b, &q, &m.id).await;
    assert_eq!(last_within(&h, t, s::now_ms()).kind, EventKind::Rescheduled);

    let t = s::now_ms();
    let d = lease_one(&b, &q, None).await;
    let h = events(&b, &q, &m.id).await;
    let e = last_within(&h, t, s::now_ms());
    assert_eq!(
        (e.attempt, &e.kind),
        (
            1,
            &EventKind::Leased {
                lease_until: d.lease_until,
                via: Via::Http
            }
        )
    );

    let nack = Nack {
        delay_ms: Some(0),
        error: Some("boom".into()),
        ..Nack::default()
    };
    s::must(b.nack(&q, &m.id, &d.lease_id, nack).await, "nack");
    let h = events(&b, &q, &m.id).await;
    let e = h.events.last().expect("an event");
    assert_eq!(
        (e.attempt, &e.kind),
        (
            1,
            &EventKind::Nacked {
                delay_ms: Some(0),
                error: Some("boom".into())
            }
        )
    );

    let d = lease_one(&b, &q, None).await;
    assert_eq!(d.attempt, 2);
    let nack = Nack {
        delay_ms: Some(0),
        ..Nack::default()
    };
    s::must(
        b.nack(&q, &m.id, &d.lease_id, nack).await,
        "nack into death",
    );
    let h = events(&b, &q, &m.id).await;
    let tail: Vec<_> = h.events.iter().rev().take(2).rev().collect();
    assert_eq!(
        tail.iter()
            .map(|e| (e.attempt, e.kind.clone()))
            .collect::<Vec<_>>(),
        [
            (
                2,
                EventKind::Nacked {
                    delay_ms: Some(0),
                    error: None
                }
            ),
            (
                2,
                EventKind::Dead {
                    reason: DeathReason::MaxAttempts
                }
            ),
        ]
    );

    s::must(b.redrive(&q, Redrive::All).await, "redrive");
    let h = events(&b, &q, &m.id).await;
    let e = h.events.last().expect("an event");
    assert_eq!((e.attempt, &e.kind), (0, &EventKind::Redriven));

    let d = lease_one(&b, &q, None).await;
    s::must(b.ack(&q, &m.id, &d.lease_id).await, "ack");
    let h = events(&b, &q, &m.id).await;
    assert_eq!(
        names(&h),
        [
            "enqueued",
            "rescheduled",
            "leased",
            "nacked",
            "leased",
            "nacked",
            "dead",
            "redriven",
            "leased",
            "acked"
        ],
        "{h:?}"
    );
    assert!(
        h.events.windows(2).all(|w| w[0].at <= w[1].at),
        "in time order: {h:?}"
    );
    assert_eq!(h.events.last().map(|e| e.attempt), Some(1));

    s::assert_not_found(b.events(&q, &s::id("nope")).await, "an unknown id");
    let plain = s::queue("history_of_a_life", "plain");
    let x = put_now(&b, &plain, "x").await;
    assert_eq!(names(&events(&b, &plain, &x.id).await), ["enqueued"]);
    s::must(b.cancel(&plain, &x.id).await, "cancel");
    s::assert_not_found(b.events(&plain, &x.id).await, "ended, not retained");
}

/// An expired lease is an `expired` event at its `lease_until` (no call
/// saw it before), then the failed attempt's path; a deferral is
/// `deferred` (until, reason nack) with the attempt given back, and past
/// `max_deferrals` `dead` (max_deferrals); a cancel with retention ends
/// the history with `cancelled`; each item of a batch has its
/// `enqueued`.
pub async fn history_expiry_deferral_cancel(b: Arc<dyn Broker>) {
    let q = s::queue("history_expiry_deferral_cancel", "q");
    let patch = QueueConfigPatch {
        retain_ms: Some(3_600_000),
        flow: Some(Some(FlowConfig {
            max_deferrals: 1,
            ..FlowConfig::default()
        })),
        ..QueueConfigPatch::default()
    };
    queue_with(&b, &q, patch).await;
    let m = put_now(&b, &q, "m").await;
    let d = lease_one(&b, &q, Some(100)).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let h = events(&b, &q, &m.id).await;
    assert_eq!(names(&h), ["enqueued", "leased", "expired"], "{h:?}");
    let e = h.events.last().expect("an event");
    assert_eq!(
        (e.at, e.attempt),
        (d.lease_until, 1),
        "expired at its lease_until"
    );

    let d = lease_one(&b, &q, None).await;
    assert_eq!(d.attempt, 2);
    let t = s::now_ms();
    let defer = Nack {
        defer: true,
        delay_ms: Some(50),
        ..Nack::default()
    };
    s::must(b.nack(&q, &m.id, &d.lease_id, defer.clone()).await, "defer");
    let h = events(&b, &q, &m.id).await;
    let e = last_within(&h, t, s::now_ms());
    match e.kind {
        EventKind::Deferred { until, reason } => {
            assert_eq!(reason, DeferReason::Nack);
            assert!(until >= e.at + 50, "until {until} at {}", e.at);
        }
        ref other => panic!("expected deferred, got {other:?}"),
    }
    assert_eq!(e.attempt, 1, "a deferral gives the attempt back");
    let d = lease_one(&b, &q, None).await;
    s::must(b.nack(&q, &m.id, &d.lease_id, defer).await, "defer again");
    let h = events(&b, &q, &m.id).await;
    assert_eq!(
        h.events.last().map(|e| e.kind.clone()),
        Some(EventKind::Dead {
            reason: DeathReason::MaxDeferrals
        }),
        "{h:?}"
    );

    let c = put(&b, &q, req(Some("c"), Schedule::Delay(60_000), "c")).await;
    s::must(b.cancel(&q, &c.id).await, "cancel");
    assert_eq!(
        names(&events(&b, &q, &c.id).await),
        ["enqueued", "cancelled"]
    );

    let batch = ["b1", "b2"]
        .iter()
        .map(|id| req(Some(id), Schedule::Delay(60_000), id))
        .collect();
    let results = s::must(
        b.enqueue(&q, batch, EnqueueOptions::default()).await,
        "batch",
    );
    for r in results {
        let out = s::must(r, "batch item");
        assert_eq!(names(&events(&b, &q, &out.id).await), ["enqueued"]);
    }
}

/// A message keeps its last 32 events: after 40 reschedules the oldest 9
/// (the enqueue and 8 reschedules) are dropped and counted.
pub async fn history_keeps_the_last_32(b: Arc<dyn Broker>) {
    let q = s::queue("history_keeps_the_last_32", "q");
    let m = put(&b, &q, req(Some("m"), Schedule::Delay(60_000), "x")).await;
    for i in 0..40u64 {
        let change = Reschedule {
            schedule: Some(Schedule::Delay(60_000 + i)),
            priority: None,
        };
        s::must(b.reschedule(&q, &m.id, change).await, "reschedule");
    }
    let h = events(&b, &q, &m.id).await;
    assert_eq!(h.events.len(), HISTORY_LEN);
    assert_eq!(h.dropped, 41 - HISTORY_LEN as u64);
    assert!(h.events.iter().all(|e| e.kind == EventKind::Rescheduled));
}

/// Trait-only events (not reachable over HTTP): the frontend a lease came
/// through (`via`: beanstalk, push; `lease_message` is beanstalk's), a
/// failed push (`push_failed` with status, error and duration; a 429
/// deferral's reason `push_429`), and a bury (`dead`: buried).
pub async fn history_frontends_push_and_bury(b: Arc<dyn Broker>) {
    let q = s::queue("history_frontends_push_and_bury", "q");
    let patch = QueueConfigPatch {
        flow: Some(Some(FlowConfig::default())),
        ..QueueConfigPatch::default()
    };
    queue_with(&b, &q, patch).await;
    let m = put_now(&b, &q, "m").await;
    let request = LeaseRequest {
        max: 1,
        wait_ms: 1_000,
        lease_ms: None,
    };
    let got = s::must(
        b.lease_via(std::slice::from_ref(&q), request, Via::Push)
            .await,
        "lease_via",
    );
    assert_eq!(got.len(), 1);
    let failed = Nack {
        delay_ms: Some(0),
        error: Some("HTTP 500: oops".into()),
        push: Some(PushFailure {
            status: Some(500),
            duration_ms: 12,
        }),
        ..Nack::default()
    };
    s::must(b.nack(&q, &m.id, &got[0].lease_id, failed).await, "nack");
    let h = events(&b, &q, &m.id).await;
    let kinds: Vec<_> = h.events.iter().map(|e| e.kind.clone()).collect();
    assert!(
        matches!(kinds[1], EventKind::Leased { via: Via::Push, .. }),
        "{kinds:?}"
    );
    assert_eq!(
        kinds[2],
        EventKind::PushFailed {
            status: Some(500),
            error: "HTTP 500: oops".into(),
            duration_ms: 12
        }
    );

    let d = s::must(b.lease_message(&q, &m.id, None).await, "lease_message");
    let busy = Nack {
        defer: true,
        delay_ms: Some(10),
        error: Some("HTTP 429: slow down".into()),
        push: Some(PushFailure {
            status: Some(429),
            duration_ms: 3,
        }),
        ..Nack::default()
    };
    s::must(b.nack(&q, &m.id, &d.lease_id, busy).await, "defer");
    let h = events(&b, &q, &m.id).await;
    let kinds: Vec<_> = h.events.iter().map(|e| e.kind.clone()).collect();
    assert!(
        matches!(
            kinds[3],
            EventKind::Leased {
                via: Via::Beanstalk,
                ..
            }
        ),
        "{kinds:?}"
    );
    assert!(
        matches!(
            kinds[4],
            EventKind::Deferred {
                reason: DeferReason::Push429,
                ..
            }
        ),
        "{kinds:?}"
    );

    let d = lease_one(&b, &q, None).await;
    s::must(b.bury(&q, &m.id, &d.lease_id, None).await, "bury");
    let h = events(&b, &q, &m.id).await;
    assert_eq!(
        h.events.last().map(|e| e.kind.clone()),
        Some(EventKind::Dead {
            reason: DeathReason::Buried
        })
    );
}
