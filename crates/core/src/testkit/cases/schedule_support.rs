//! Helpers of the schedule cases (`schedules`, `schedules_wall`): terse
//! definitions and calls, and leasing fired messages while checking, for
//! each, its id `<schedule id>:<t>`, its headers, and that it was not
//! leased before its `deliver_at`, which is not before its fire time `t`.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::broker::{Broker, Upsert};
use crate::error::BrokerError;
use crate::message::{Delivery, EnqueueOptions, LeaseRequest};
use crate::model::QueueName;
use crate::recurring::{
    Catchup, MessageTemplate, Overlap, Recurrence, ScheduleDefinition, ScheduleId, ScheduleRecord,
    DEFAULT_CATCHUP_WINDOW_MS, HEADER_SCHEDULE, HEADER_SCHEDULED_FOR,
};
use crate::testkit::support as s;

/// The lease length the helpers ask for, so a delivery's lease moment is
/// exactly `lease_until - LEASE_MS`.
pub(super) const LEASE_MS: u64 = 30_000;

/// Longest single lease wait the helpers use (api.md's `wait_ms` maximum).
const MAX_WAIT_MS: u64 = 60_000;

pub(super) const HOUR_MS: u64 = 3_600_000;

/// Waits (polling: the write is the timers' own, or a call's settling)
/// until the fire `t` of `id` is written ahead, and returns its message.
pub(super) async fn written_ahead(
    b: &Arc<dyn Broker>,
    q: &QueueName,
    id: &ScheduleId,
    t: u64,
) -> crate::message::Message {
    let fire = id.fire_message_id(t);
    s::eventually(1_500, &format!("fire {fire} written ahead"), || async {
        b.get(q, &fire).await.is_ok()
    })
    .await;
    s::get(b, q, &fire).await
}

pub(super) fn sid(id: &str) -> ScheduleId {
    ScheduleId::new(id).unwrap_or_else(|e| panic!("bad test schedule id {id:?}: {e}"))
}

/// A definition with api.md's defaults and a small template (payload
/// `tick`, header `kind: test`).
pub(super) fn definition(recurrence: Recurrence, start_at: u64) -> ScheduleDefinition {
    ScheduleDefinition {
        recurrence,
        start_at,
        end_at: None,
        max_fires: None,
        message: MessageTemplate {
            payload: b"tick".to_vec(),
            priority: None,
            headers: BTreeMap::from([("kind".to_string(), "test".to_string())]),
            max_attempts: None,
            key: None,
        },
        catchup: Catchup::Latest,
        catchup_window_ms: DEFAULT_CATCHUP_WINDOW_MS,
        overlap: Overlap::Allow,
        jitter_ms: 0,
        paused: false,
    }
}

pub(super) fn every(every_ms: u64, start_at: u64) -> ScheduleDefinition {
    definition(Recurrence::Every { every_ms }, start_at)
}

pub(super) fn cron(expr: &str, tz: &str, start_at: u64) -> ScheduleDefinition {
    let recurrence = Recurrence::Cron {
        expr: expr.into(),
        tz: tz.into(),
    };
    definition(recurrence, start_at)
}

/// `put_schedule` with the default options, panicking on an error.
pub(super) async fn put_schedule(
    b: &Arc<dyn Broker>,
    q: &QueueName,
    id: &ScheduleId,
    def: ScheduleDefinition,
) -> (Upsert, ScheduleRecord) {
    let put = b.put_schedule(q, id, def, EnqueueOptions::default()).await;
    s::must(put, "put_schedule")
}

pub(super) async fn get_schedule(
    b: &Arc<dyn Broker>,
    q: &QueueName,
    id: &ScheduleId,
) -> ScheduleRecord {
    s::must(b.get_schedule(q, id).await, "get_schedule")
}

/// One leased message of a schedule: its fire time and the delivery.
#[derive(Debug)]
pub(super) struct Fired {
    pub schedule: String,
    pub t: u64,
    pub delivery: Delivery,
    /// When it was leased (exact: from `lease_until`).
    pub leased_at: u64,
}

/// Checks a leased fired message against the fire rules and returns it
/// with its fire time.
pub(super) fn check_fired(d: Delivery) -> Fired {
    let schedule = d
        .headers
        .get(HEADER_SCHEDULE)
        .unwrap_or_else(|| panic!("fired message without {HEADER_SCHEDULE}: {d:?}"))
        .clone();
    let t: u64 = d
        .headers
        .get(HEADER_SCHEDULED_FOR)
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("fired message without a numeric {HEADER_SCHEDULED_FOR}: {d:?}"));
    assert_eq!(d.id.as_str(), format!("{schedule}:{t}"), "fired message id");
    assert_eq!(d.headers.get("kind").map(String::as_str), Some("test"));
    assert_eq!(d.payload, b"tick", "the template's payload");
    assert!(
        d.deliver_at >= t,
        "deliver_at {} before fire time {t}",
        d.deliver_at
    );
    let leased_at = d.lease_until - LEASE_MS;
    assert!(
        leased_at >= d.deliver_at,
        "{} leased at {leased_at}, {} ms before its deliver_at",
        d.id,
        d.deliver_at - leased_at
    );
    Fired {
        schedule,
        t,
        delivery: d,
        leased_at,
    }
}

/// Leases (and acks) every message of `q` until wall time `until`, checking
/// each with [`check_fired`]; returns them in lease order.
pub(super) async fn collect_until(b: &Arc<dyn Broker>, q: &QueueName, until: u64) -> Vec<Fired> {
    let mut fired = Vec::new();
    loop {
        let now = s::now_ms();
        if now >= until {
            return fired;
        }
        let wait_ms = (until - now).min(MAX_WAIT_MS);
        for d in lease_fired(b, q, wait_ms).await {
            s::must(b.ack(q, &d.id, &d.lease_id).await, "ack fired message");
            fired.push(check_fired(d));
        }
    }
}

/// Leases (and acks) messages of `q` until `count` came or `within_ms`
/// passed; panics on too few.
pub(super) async fn collect_count(
    b: &Arc<dyn Broker>,
    q: &QueueName,
    count: usize,
    within_ms: u64,
) -> Vec<Fired> {
    let deadline = s::now_ms() + within_ms;
    let mut fired = Vec::new();
    while fired.len() < count {
        let now = s::now_ms();
        assert!(
            now < deadline,
            "only {} of {count} fired messages within {within_ms} ms: {fired:?}",
            fired.len()
        );
        let wait_ms = (deadline - now).min(MAX_WAIT_MS);
        let max = (count - fired.len()) as u32;
        for d in lease_fired_max(b, q, max, wait_ms).await {
            s::must(b.ack(q, &d.id, &d.lease_id).await, "ack fired message");
            fired.push(check_fired(d));
        }
    }
    fired
}

pub(super) async fn lease_fired(b: &Arc<dyn Broker>, q: &QueueName, wait_ms: u64) -> Vec<Delivery> {
    lease_fired_max(b, q, 100, wait_ms).await
}

pub(super) async fn lease_fired_max(
    b: &Arc<dyn Broker>,
    q: &QueueName,
    max: u32,
    wait_ms: u64,
) -> Vec<Delivery> {
    let request = LeaseRequest {
        max,
        wait_ms,
        lease_ms: Some(LEASE_MS),
    };
    s::must(b.lease(std::slice::from_ref(q), request).await, "lease")
}

/// The fire times of `schedule` among `fired`, in lease order.
pub(super) fn times_of(fired: &[Fired], schedule: &ScheduleId) -> Vec<u64> {
    fired
        .iter()
        .filter(|f| f.schedule == schedule.as_str())
        .map(|f| f.t)
        .collect()
}

pub(super) fn assert_schedule_not_found<T: std::fmt::Debug>(r: Result<T, BrokerError>, what: &str) {
    assert!(
        matches!(r, Err(BrokerError::ScheduleNotFound { .. })),
        "{what}: expected ScheduleNotFound, got {r:?}"
    );
}

/// Sleeps (on the case's time) until wall time `t`.
pub(super) async fn tick_until(t: u64) {
    let now = s::now_ms();
    if now < t {
        tokio::time::sleep(std::time::Duration::from_millis(t - now)).await;
    }
}
