//! Pause and resume, cancel, reschedule, stats, shutdown.

use std::sync::Arc;
use tokio::time::Instant;

use crate::broker::Broker;
use crate::message::{MessageState, Reschedule, Schedule};
use crate::testkit::support::{self as s, get, lease, lease_one, put, put_now, req, SLACK_MS};

/// A paused queue accepts enqueues but leases nothing, not even to a
/// waiting call; resume delivers to a waiting call at once.
pub async fn pause_stops_leasing_and_resume_delivers(b: Arc<dyn Broker>) {
    let q = s::queue("pause_stops_leasing_and_resume_delivers", "q");
    s::make_queue(&b, &q, 10).await;
    let info = s::must(b.pause(&q, None).await, "pause");
    assert!(info.paused);
    let out = put_now(&b, &q, "m").await;
    assert!(out.created, "a paused queue keeps accepting");
    assert_eq!(get(&b, &q, &out.id).await.state, MessageState::Ready);
    assert!(lease(&b, &q, 1, 0).await.is_empty(), "paused queue leased");
    assert!(
        lease(&b, &q, 1, 300).await.is_empty(),
        "paused queue leased to a waiter"
    );
    let waiter = {
        let (b, q) = (b.clone(), q.clone());
        tokio::spawn(async move { lease(&b, &q, 1, 10_000).await })
    };
    let start = Instant::now();
    let info = s::must(b.resume(&q).await, "resume");
    assert!(!info.paused);
    let got = waiter.await.unwrap_or_else(|e| panic!("waiter: {e}"));
    assert_eq!(got.len(), 1, "resume must deliver to the waiting lease");
    assert!(
        start.elapsed().as_millis() as u64 <= SLACK_MS,
        "resume woke late"
    );
    assert!(!s::must(b.get_queue(&q).await, "get_queue").paused);
}

/// Cancel works in every state; the id is gone (a cancelled lease cannot
/// ack: the message no longer exists), and a second cancel is not found.
pub async fn cancel_in_every_state(b: Arc<dyn Broker>) {
    let q = s::queue("cancel_in_every_state", "q");
    s::make_queue(&b, &q, 1).await;
    let dead = put_now(&b, &q, "dead").await;
    s::nack_times(&b, &q, &dead.id, 1).await;
    let leased = put_now(&b, &q, "leased").await;
    let lease_of = lease_one(&b, &q, None).await;
    let ready = put_now(&b, &q, "ready").await;
    let scheduled = put(&b, &q, req(Some("sch"), Schedule::Delay(60_000), "s")).await;
    for out in [&dead, &leased, &ready, &scheduled] {
        s::must(b.cancel(&q, &out.id).await, "cancel");
        s::assert_not_found(b.get(&q, &out.id).await, "get after cancel");
        s::assert_not_found(b.cancel(&q, &out.id).await, "second cancel");
    }
    s::assert_not_found(
        b.ack(&q, &leased.id, &lease_of.lease_id).await,
        "ack of a cancelled leased message",
    );
    assert!(
        lease(&b, &q, 10, 0).await.is_empty(),
        "cancelled message delivered"
    );
    let stats = s::must(b.get_queue(&q).await, "get_queue").stats;
    assert_eq!(
        (stats.scheduled, stats.ready, stats.leased, stats.dead),
        (0, 0, 0, 0)
    );
}

fn at(schedule: Schedule) -> Reschedule {
    Reschedule {
        schedule: Some(schedule),
        priority: None,
    }
}

/// Reschedule moves a scheduled message later and earlier (delivery follows
/// the new time, never before it), and a ready message back to scheduled.
pub async fn reschedule_scheduled_and_ready(b: Arc<dyn Broker>) {
    let q = s::queue("reschedule_scheduled_and_ready", "q");
    s::make_queue(&b, &q, 10).await;
    let out = put(&b, &q, req(Some("m"), Schedule::Delay(1_000), "x")).await;
    let later = s::now_ms() + 60_000;
    let m = s::must(
        b.reschedule(&q, &out.id, at(Schedule::At(later))).await,
        "later",
    );
    assert_eq!((m.deliver_at, m.state), (later, MessageState::Scheduled));
    let m = s::must(
        b.reschedule(&q, &out.id, at(Schedule::Delay(300))).await,
        "earlier",
    );
    assert_eq!(m.state, MessageState::Scheduled);
    assert!(lease(&b, &q, 1, 0).await.is_empty(), "delivered early");
    let d = lease_one(&b, &q, None).await;
    assert!(
        s::now_ms() >= m.deliver_at,
        "delivered before the new deliver_at"
    );
    assert!(
        s::now_ms() <= m.deliver_at + SLACK_MS,
        "rescheduled delivery late"
    );
    assert_eq!(d.deliver_at, m.deliver_at);
    s::must(b.ack(&q, &d.id, &d.lease_id).await, "ack");

    let ready = put_now(&b, &q, "r").await;
    let m = s::must(
        b.reschedule(&q, &ready.id, at(Schedule::Delay(60_000)))
            .await,
        "ready",
    );
    assert_eq!(
        m.state,
        MessageState::Scheduled,
        "ready moved to the future"
    );
    assert!(
        lease(&b, &q, 1, 0).await.is_empty(),
        "rescheduled message delivered"
    );
}

/// A priority-only reschedule keeps deliver_at and changes delivery order;
/// leased and dead messages cannot be rescheduled (`InvalidState`).
pub async fn reschedule_priority_and_invalid_states(b: Arc<dyn Broker>) {
    let q = s::queue("reschedule_priority_and_invalid_states", "q");
    s::make_queue(&b, &q, 1).await;
    let first = put_now(&b, &q, "first").await;
    let second = put_now(&b, &q, "second").await;
    let change = Reschedule {
        schedule: None,
        priority: Some(1),
    };
    let m = s::must(b.reschedule(&q, &second.id, change).await, "priority");
    assert_eq!((m.priority, m.deliver_at), (1, second.deliver_at));
    let d = lease_one(&b, &q, None).await;
    assert_eq!(d.id, second.id, "priority 1 goes before the default 1024");
    s::assert_invalid_state(
        b.reschedule(&q, &second.id, at(Schedule::Now)).await,
        "reschedule of a leased message",
    );
    s::must(
        b.nack(&q, &d.id, &d.lease_id, crate::Nack::default()).await,
        "nack",
    );
    assert_eq!(get(&b, &q, &second.id).await.state, MessageState::Dead);
    s::assert_invalid_state(
        b.reschedule(&q, &second.id, at(Schedule::Now)).await,
        "reschedule of a dead message",
    );
    assert_eq!(get(&b, &q, &first.id).await.state, MessageState::Ready);
}

/// The queue's stats count messages by state through a whole lifecycle.
pub async fn stats_through_lifecycle(b: Arc<dyn Broker>) {
    let q = s::queue("stats_through_lifecycle", "q");
    s::make_queue(&b, &q, 1).await;
    let counts = |b: Arc<dyn Broker>, q: crate::QueueName| async move {
        let st = s::must(b.get_queue(&q).await, "get_queue").stats;
        (st.scheduled, st.ready, st.leased, st.dead)
    };
    assert_eq!(counts(b.clone(), q.clone()).await, (0, 0, 0, 0));
    put(&b, &q, req(Some("s"), Schedule::Delay(60_000), "s")).await;
    for name in ["a", "b", "c"] {
        put_now(&b, &q, name).await;
    }
    assert_eq!(counts(b.clone(), q.clone()).await, (1, 3, 0, 0));
    let d1 = lease_one(&b, &q, None).await;
    let d2 = lease_one(&b, &q, None).await;
    assert_eq!(counts(b.clone(), q.clone()).await, (1, 1, 2, 0));
    s::must(b.ack(&q, &d1.id, &d1.lease_id).await, "ack");
    s::must(
        b.nack(&q, &d2.id, &d2.lease_id, crate::Nack::default())
            .await,
        "nack",
    );
    assert_eq!(counts(b.clone(), q.clone()).await, (1, 1, 0, 1));
    s::must(b.redrive(&q, crate::Redrive::All).await, "redrive");
    assert_eq!(counts(b.clone(), q.clone()).await, (1, 2, 0, 0));
}

/// Shutdown makes a waiting lease return an empty list promptly.
pub async fn shutdown_wakes_waiting_lease(b: Arc<dyn Broker>) {
    let q = s::queue("shutdown_wakes_waiting_lease", "q");
    s::make_queue(&b, &q, 10).await;
    let waiter = {
        let (b, q) = (b.clone(), q.clone());
        tokio::spawn(async move {
            let r = b.lease(std::slice::from_ref(&q), lease_req()).await;
            (r, Instant::now())
        })
    };
    // The waiter must be waiting before the shutdown for this to test
    // anything; there is no event to await for that, so give it time.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let start = Instant::now();
    s::must(b.shutdown().await, "shutdown");
    let (result, returned) = waiter.await.unwrap_or_else(|e| panic!("waiter: {e}"));
    let got = s::must(result, "waiting lease during shutdown");
    assert!(got.is_empty(), "shutdown lease gave {got:?}");
    let took = returned.saturating_duration_since(start).as_millis() as u64;
    assert!(
        took <= SLACK_MS,
        "waiting lease returned {took} ms after shutdown"
    );
}

fn lease_req() -> crate::LeaseRequest {
    crate::LeaseRequest {
        max: 1,
        wait_ms: 20_000,
        lease_ms: None,
    }
}

/// `reschedule` answers the changed message, also when it moves beyond a
/// broker's in-memory horizon (api.md: PATCH "returns the message"), and
/// a read right after agrees with the answer.
pub async fn reschedule_returns_the_changed_message(b: Arc<dyn Broker>) {
    let q = s::queue("reschedule_returns_the_changed_message", "q");
    s::make_queue(&b, &q, 10).await;
    let out = put(&b, &q, req(Some("m"), Schedule::Delay(1_000), "x")).await;
    for delay in [3_600_000, 10 * 86_400_000, 2_000] {
        let before = s::now_ms();
        let m = s::must(
            b.reschedule(&q, &out.id, at(Schedule::Delay(delay))).await,
            "reschedule",
        );
        assert!(
            m.deliver_at >= before + delay && m.deliver_at <= s::now_ms() + delay,
            "delay {delay}: answered deliver_at {} is not the new one",
            m.deliver_at
        );
        assert_eq!(m.state, MessageState::Scheduled);
        assert_eq!(get(&b, &q, &out.id).await.deliver_at, m.deliver_at);
    }
}
