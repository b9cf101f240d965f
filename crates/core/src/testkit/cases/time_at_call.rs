//! Time settled at the call (issue 31): every call first applies what is
//! due at its own `now` (lease expiries, due messages, schedule cursors),
//! then acts, exactly as the model does. `conformance_tests_time_at_call!`
//! runs these against brokers whose background timers are held back
//! (`LocalBroker::hold_driver`, `RedisBroker::hold_timers`), so a broker
//! that applies time only when its timers run fails them; they pass on a
//! broker whose timers run too.

use std::sync::Arc;
use std::time::Duration;

use crate::broker::Broker;
use crate::message::{MessageState, Nack, Schedule};
use crate::model::{QueueConfigPatch, RetryPolicy};
use crate::testkit::support::{self as s, get, lease, lease_for, put, req};

use super::schedule_support::{every, put_schedule, sid, written_ahead, HOUR_MS};

/// Sleeps (tokio time: virtual in-process, real over the network) until
/// the case's wall clock is past `t`.
async fn sleep_past(t: u64) {
    let ahead = t.saturating_sub(s::now_ms());
    tokio::time::sleep(Duration::from_millis(ahead)).await;
    s::tick_past(t).await;
}

/// An ack, nack or extend with a lease that ran out (and that nobody has
/// noticed: no timer ran) is `LeaseMismatch`, and the message is back as
/// the expiry left it (a timeout counted, attempt 1 spent).
pub async fn ack_after_expiry_is_lease_mismatch(b: Arc<dyn Broker>) {
    let q = s::queue("ack_after_expiry_is_lease_mismatch", "q");
    s::make_queue(&b, &q, 5).await;
    for name in ["ack", "nack", "extend"] {
        put(&b, &q, req(Some(name), Schedule::Now, name)).await;
    }
    let leased = lease_for(&b, &q, 3, 0, Some(1_000)).await;
    assert_eq!(leased.len(), 3, "three ready messages, one lease call");
    let until = leased.iter().map(|d| d.lease_until).max().unwrap_or(0);
    sleep_past(until).await;
    for d in &leased {
        let late = match d.id.as_str() {
            "ack" => b.ack(&q, &d.id, &d.lease_id).await,
            "nack" => b.nack(&q, &d.id, &d.lease_id, Nack::default()).await,
            _ => b.extend(&q, &d.id, &d.lease_id, None).await.map(|_| ()),
        };
        s::assert_lease_mismatch(late, &format!("{} after the lease expired", d.id));
        let m = get(&b, &q, &d.id).await;
        assert!(
            matches!(m.state, MessageState::Scheduled | MessageState::Ready),
            "{}: the expired lease is failed, got {:?}",
            d.id,
            m.state
        );
        assert_eq!(m.attempts, 1, "{}: one delivery spent", d.id);
        assert_eq!(m.lease_until, None, "{}: no lease any more", d.id);
    }
}

/// The backoff after an expired lease counts from the expiry
/// (`lease_until`), not from when the broker noticed it.
pub async fn backoff_counts_from_expiry(b: Arc<dyn Broker>) {
    let q = s::queue("backoff_counts_from_expiry", "q");
    let patch = QueueConfigPatch {
        max_attempts: Some(5),
        retry: Some(RetryPolicy {
            initial_ms: 10_000,
            max_ms: 60_000,
            multiplier: 2.0,
        }),
        ..QueueConfigPatch::default()
    };
    s::must(b.put_queue(&q, patch).await, "put_queue");
    let out = s::put_now(&b, &q, "m").await;
    let mut leased = lease_for(&b, &q, 1, 0, Some(1_000)).await;
    let d = leased.pop().unwrap_or_else(|| panic!("m is ready"));
    // Noticed 3 s after the expiry, at the earliest.
    sleep_past(d.lease_until + 3_000).await;
    let m = get(&b, &q, &out.id).await;
    assert_eq!(m.state, MessageState::Scheduled, "backing off: {m:?}");
    let (from, to) = (d.lease_until + 10_000, d.lease_until + 11_000);
    assert!(
        (from..=to).contains(&m.deliver_at),
        "backoff 10 s (+ at most 10% jitter) from the expiry {}: deliver_at {} not in {from}..={to}",
        d.lease_until,
        m.deliver_at
    );
}

/// A schedule cursor that is due when a `put_schedule` or a pause comes
/// (no timer has fired it) fires first, under the definition it was due
/// under; the change applies after.
pub async fn due_cursor_fires_at_put_and_pause(b: Arc<dyn Broker>) {
    let q = s::queue("due_cursor_fires_at_put_and_pause", "q");
    let start = s::now_ms() + 1_000;
    let (paused, replaced) = (sid("paused"), sid("replaced"));
    put_schedule(&b, &q, &paused, every(60_000, start)).await;
    put_schedule(&b, &q, &replaced, every(60_000, start)).await;
    sleep_past(start + 500).await;

    let record = s::must(b.set_schedule_paused(&q, &paused, true).await, "pause");
    assert_eq!(
        record.fires, 1,
        "the due fire at {start} counted: {record:?}"
    );
    assert_eq!(record.last_fire_at, Some(start));
    assert!(record.definition.paused);
    let fired = get(&b, &q, &paused.fire_message_id(start)).await;
    assert_eq!(fired.payload, b"tick", "fired before the pause");

    let mut changed = every(60_000, start);
    changed.message.payload = b"tock".to_vec();
    let (_, record) = put_schedule(&b, &q, &replaced, changed).await;
    assert_eq!(
        record.fires, 1,
        "the due fire at {start} counted: {record:?}"
    );
    assert_eq!(record.last_fire_at, Some(start));
    let fired = get(&b, &q, &replaced.fire_message_id(start)).await;
    assert_eq!(
        fired.payload, b"tick",
        "fired under the definition it fell due under"
    );
}

/// greenstalk's `test_delays`: a lease that waits past a message's due
/// time gets it, also when it falls due at the very deadline and no timer
/// has made it ready; a wait that ends before the due time is empty.
pub async fn lease_deadline_after_due_returns_it(b: Arc<dyn Broker>) {
    let q = s::queue("lease_deadline_after_due_returns_it", "q");
    s::make_queue(&b, &q, 5).await;
    let out = put(&b, &q, req(Some("m"), Schedule::Delay(2_000), "m")).await;
    let early = out.deliver_at.saturating_sub(1_000 + s::now_ms());
    assert!(
        lease(&b, &q, 1, early).await.is_empty(),
        "a wait ending before deliver_at {} is empty",
        out.deliver_at
    );
    // Waits until just after the due time.
    let wait = (out.deliver_at + 1).saturating_sub(s::now_ms());
    let got = lease(&b, &q, 1, wait).await;
    assert_eq!(
        got.len(),
        1,
        "due at {} before the wait's deadline: {got:?}",
        out.deliver_at
    );
    assert_eq!(got[0].id, out.id);
    assert!(s::now_ms() >= out.deliver_at, "delivered early");
}

/// A fire written ahead whose lease ran out (and that no timer has failed
/// yet) is not held by a worker any more: a pause of its schedule cancels
/// it, as the model does (it settles the expiry first). A backend that
/// judged the lease without settling time kept it.
pub async fn written_ahead_fire_whose_lease_ran_out_is_cancelled_by_a_pause(b: Arc<dyn Broker>) {
    let q = s::queue("written_ahead_fire_whose_lease_ran_out", "q");
    let start_at = s::now_ms() + 5_000;
    let id = sid("expired");
    put_schedule(&b, &q, &id, every(HOUR_MS, start_at)).await;
    // A second, equal `PUT` changes nothing, but settles the schedule at
    // its call: the fire, due to be written ahead, is written.
    put_schedule(&b, &q, &id, every(HOUR_MS, start_at)).await;
    written_ahead(&b, &q, &id, start_at).await;
    let fire = id.fire_message_id(start_at);
    let change = crate::message::Reschedule {
        schedule: Some(Schedule::Now),
        priority: None,
    };
    s::must(
        b.reschedule(&q, &fire, change).await,
        "reschedule the fire to now",
    );
    let mut leased = lease_for(&b, &q, 1, 0, Some(1_000)).await;
    let held = leased
        .pop()
        .unwrap_or_else(|| panic!("the moved fire is ready"));
    assert_eq!(held.id, fire);
    sleep_past(held.lease_until).await;
    s::must(b.set_schedule_paused(&q, &id, true).await, "pause");
    s::assert_not_found(
        b.get(&q, &fire).await,
        "the fire whose lease ran out, after the pause",
    );
}
