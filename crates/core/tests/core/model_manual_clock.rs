//! The reference model on a manual clock: the time rules that real-time
//! conformance cases can only bound, checked here to the millisecond.

#![cfg(feature = "testkit")]

use std::sync::Arc;

use delayd_core::testkit::ModelBroker;
use delayd_core::{
    Broker, EnqueueOptions, EnqueueRequest, LeaseRequest, ListQuery, ManualClock, MessageId,
    MessageState, QueueConfigPatch, QueueName, RetryPolicy, Schedule,
};

const T0: u64 = 1_700_000_000_000;

async fn setup(max_attempts: u32) -> (ModelBroker, ManualClock, QueueName) {
    let clock = ManualClock::new(T0);
    let broker = ModelBroker::with_clock(Arc::new(clock.clone()));
    let q = QueueName::new("q").unwrap();
    let patch = QueueConfigPatch {
        flow: None,
        lease_ms: Some(1_000),
        max_attempts: Some(max_attempts),
        // multiplier 1 and initial 1000: the backoff is 1000..=1100 ms.
        retry: Some(RetryPolicy {
            initial_ms: 1_000,
            max_ms: 1_000,
            multiplier: 1.0,
        }),
        push: None,
        retain_ms: None,
    };
    broker.put_queue(&q, patch).await.unwrap();
    (broker, clock, q)
}

async fn enqueue(b: &ModelBroker, q: &QueueName, schedule: Schedule) -> (MessageId, u64) {
    let r = EnqueueRequest {
        schedule,
        ..EnqueueRequest::default()
    };
    let mut out = b
        .enqueue(q, vec![r], EnqueueOptions::default())
        .await
        .unwrap();
    let out = out.remove(0).unwrap();
    (out.id, out.seq)
}

async fn lease_now(b: &ModelBroker, q: &QueueName) -> Vec<delayd_core::Delivery> {
    b.lease(std::slice::from_ref(q), LeaseRequest::default())
        .await
        .unwrap()
}

#[tokio::test]
async fn seq_starts_at_one_and_readiness_follows_the_clock() {
    let (b, clock, q) = setup(10).await;
    let (id, seq) = enqueue(&b, &q, Schedule::Delay(500)).await;
    assert_eq!(seq, 1);
    assert_eq!(b.get(&q, &id).await.unwrap().state, MessageState::Scheduled);
    clock.advance(499);
    assert!(lease_now(&b, &q).await.is_empty(), "1 ms early");
    clock.advance(1);
    assert_eq!(b.get(&q, &id).await.unwrap().state, MessageState::Ready);
    let got = lease_now(&b, &q).await;
    assert_eq!(got[0].lease_until, T0 + 500 + 1_000);
}

#[tokio::test]
async fn expiry_backoff_counts_from_the_expiry_not_from_when_seen() {
    let (b, clock, q) = setup(10).await;
    let (id, _) = enqueue(&b, &q, Schedule::Now).await;
    let d = lease_now(&b, &q).await.remove(0);
    assert_eq!(d.lease_until, T0 + 1_000);
    // Nobody looks until long after the expiry.
    clock.advance(1_000 + 50);
    let m = b.get(&q, &id).await.unwrap();
    assert_eq!(m.state, MessageState::Scheduled);
    assert!(
        (T0 + 2_000..=T0 + 2_100).contains(&m.deliver_at),
        "{}",
        m.deliver_at
    );
    assert_eq!((m.attempts, m.counters.timeouts), (1, 1));
    clock.advance(5_000);
    let again = lease_now(&b, &q).await.remove(0);
    assert_eq!(again.attempt, 2);
}

#[tokio::test]
async fn death_by_expiry_is_dated_at_the_expiry() {
    let (b, clock, q) = setup(1).await;
    let (id, _) = enqueue(&b, &q, Schedule::Now).await;
    lease_now(&b, &q).await;
    clock.advance(60_000);
    let m = b.get(&q, &id).await.unwrap();
    assert_eq!(m.state, MessageState::Dead);
    assert_eq!(m.died_at, Some(T0 + 1_000));
    assert_eq!(m.counters.buries, 1);
}

#[tokio::test]
async fn redrive_makes_ready_now_and_keeps_a_past_deliver_at() {
    let (b, clock, q) = setup(1).await;
    let (id, _) = enqueue(&b, &q, Schedule::At(T0 - 5)).await;
    let d = lease_now(&b, &q).await.remove(0);
    b.bury(&q, &id, &d.lease_id, None).await.unwrap();
    clock.advance(10);
    assert_eq!(
        b.redrive(&q, delayd_core::Redrive::Oldest(1))
            .await
            .unwrap(),
        1
    );
    let m = b.get(&q, &id).await.unwrap();
    assert_eq!(
        (m.state, m.deliver_at, m.attempts),
        (MessageState::Ready, T0 - 5, 0)
    );
}

#[tokio::test]
async fn timed_pause_in_the_past_is_not_a_pause() {
    let (b, clock, q) = setup(1).await;
    let info = b.pause(&q, Some(T0 + 100)).await.unwrap();
    assert!(info.paused);
    clock.advance(100);
    let info = b.get_queue(&q).await.unwrap();
    assert!(!info.paused);
    assert_eq!(info.paused_until, None);
}

#[tokio::test]
async fn list_after_an_unknown_id_starts_over() {
    let (b, _clock, q) = setup(1).await;
    enqueue(&b, &q, Schedule::Now).await;
    enqueue(&b, &q, Schedule::Now).await;
    let query = ListQuery {
        state: MessageState::Ready,
        after: Some(MessageId::new("gone").unwrap()),
        limit: 10,
    };
    assert_eq!(b.list(&q, query).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_clock_stepped_back_makes_ready_messages_wait_again() {
    let (b, clock, q) = setup(1).await;
    let (id, _) = enqueue(&b, &q, Schedule::At(T0 + 100)).await;
    clock.advance(100);
    assert_eq!(b.get(&q, &id).await.unwrap().state, MessageState::Ready);
    clock.set(T0 + 50);
    assert_eq!(b.get(&q, &id).await.unwrap().state, MessageState::Scheduled);
    assert!(
        lease_now(&b, &q).await.is_empty(),
        "never early by wall time"
    );
}

/// The preview endpoint's fire times are the ones a schedule fires, across
/// a DST gap too (Berlin, 2026-03-29: 02:30 does not exist and fires at
/// 03:00 CEST): the model fires it with the clock set to each previewed
/// time, and each previewed time's message is there at that time.
#[tokio::test]
async fn a_schedule_fires_at_the_previewed_times_across_a_dst_gap() {
    use delayd_core::recurring::{preview, HEADER_SCHEDULED_FOR};
    use delayd_core::{
        Catchup, MessageTemplate, Overlap, Recurrence, ScheduleDefinition, ScheduleId,
    };
    // 2026-03-28T00:00:00Z.
    const START: u64 = 1_774_656_000_000;
    let clock = ManualClock::new(START);
    let broker = ModelBroker::with_clock(Arc::new(clock.clone()));
    let q = QueueName::new("dst").unwrap();
    let recurrence = Recurrence::Cron {
        expr: "30 2 * * *".into(),
        tz: "Europe/Berlin".into(),
    };
    let previewed = preview(&recurrence, START, 4).unwrap();
    let definition = ScheduleDefinition {
        recurrence,
        start_at: START,
        end_at: None,
        max_fires: None,
        message: MessageTemplate::default(),
        catchup: Catchup::All,
        catchup_window_ms: 3_600_000,
        overlap: Overlap::Allow,
        jitter_ms: 0,
        paused: false,
    };
    let id = ScheduleId::new("daily").unwrap();
    broker
        .put_schedule(&q, &id, definition, EnqueueOptions::default())
        .await
        .unwrap();
    let mut fired = Vec::new();
    for &t in &previewed {
        clock.set(t - 1);
        let record = broker.get_schedule(&q, &id).await.unwrap();
        assert_eq!(record.next_fire_at, Some(t), "the cursor before {t}");
        clock.set(t);
        let ready = broker
            .list(
                &q,
                ListQuery {
                    state: MessageState::Ready,
                    after: None,
                    limit: 100,
                },
            )
            .await
            .unwrap();
        fired = ready
            .iter()
            .map(|m| m.headers[HEADER_SCHEDULED_FOR].parse::<u64>().unwrap())
            .collect();
        fired.sort_unstable();
        assert_eq!(fired.last(), Some(&t), "fired at {t}: {fired:?}");
    }
    assert_eq!(fired, previewed);
    // The gap's fire is 03:00 CEST (01:00 UTC), a day after 01:30 UTC.
    assert_eq!(previewed[1] - previewed[0], 84_600_000);
}
