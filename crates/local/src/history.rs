//! Message history (api.md, "Message history") on the embedded store.
//!
//! A message's events are numbered from 0 over its life (its record's
//! `events` counts them). Most of them cost no write of their own:
//! - event 0 is always `enqueued` at the record's `enqueued_at`, attempt 0:
//!   it is implied by the record, never stored;
//! - the latest event rides in the record itself (`MessageRecord::last`),
//!   which every transition rewrites anyway;
//! - only an event that a later one replaces as the latest is written to
//!   the `events` keyspace, under `[seq][n]`, in the same write set as that
//!   later transition; the event 32 back is deleted in the same step, so a
//!   message keeps its last [`HISTORY_LEN`].
//!
//! So the common life (enqueued, leased, acked without retention) writes
//! no event key at all. A history ends with its message: its stored events
//! deleted with it, or, when the message is retained, kept until the
//! sweeper reclaims the retained record (module `retain`). In memory a
//! record carries its count and its latest event (boxed; `None` until the
//! first transition after the enqueue).

use delayd_core::{
    BrokerError, BrokerResult, Event, EventKind, History, MessageId, QueueName, HISTORY_LEN,
};

use crate::codec::{self, EventRecord, MessageRecord};
use crate::messages::store_err;
use crate::state::{State, Tx};
use crate::store::{Space, Store, WriteSet};

/// Appends `kind` at `at` to `rec`'s history (the attempt as `rec` has it
/// now, after the transition): the previous latest event goes to the
/// keyspace, the new one into the record, and the event pushed out of the
/// last 32 is deleted.
fn append(
    ws: &mut WriteSet,
    rec: &mut MessageRecord,
    at: u64,
    kind: EventKind,
) -> BrokerResult<()> {
    if rec.events == 0 {
        // The creation: event 0, implied by the record.
        debug_assert_eq!(kind, EventKind::Enqueued);
        rec.events = 1;
        return Ok(());
    }
    let n = rec.events;
    if let Some(previous) = rec.last.take() {
        let value = codec::encode_record(&EventRecord { event: *previous }).map_err(store_err)?;
        ws.put(Space::Events, codec::event_key(rec.seq, n - 1), value);
    }
    rec.last = Some(Box::new(Event {
        at,
        attempt: rec.attempts,
        kind,
    }));
    rec.events = n.saturating_add(1);
    // Pushed out of the last 32: stored unless it is the implied event 0.
    if let Some(out) = (n + 1).checked_sub(HISTORY_LEN as u32 + 1) {
        if out >= 1 {
            ws.delete(Space::Events, codec::event_key(rec.seq, out));
        }
    }
    Ok(())
}

/// The numbers of the kept events of a message that appended `events`.
fn kept(events: u32) -> std::ops::Range<u32> {
    events.saturating_sub(HISTORY_LEN as u32)..events
}

/// The numbers of the kept events that are stored as keys: not the
/// implied event 0, not the latest (in the record).
fn stored(events: u32) -> std::ops::Range<u32> {
    let kept = kept(events);
    kept.start.max(1)..kept.end.saturating_sub(1).max(kept.start.max(1))
}

/// Deletes the stored events of `rec`'s history.
pub(crate) fn forget(ws: &mut WriteSet, rec: &MessageRecord) {
    for n in stored(rec.events) {
        ws.delete(Space::Events, codec::event_key(rec.seq, n));
    }
}

impl State {
    /// Appends an event to `rec`'s history in `tx` (when the broker keeps
    /// histories: `LocalConfig::history`).
    pub fn append_event(
        &self,
        rec: &mut MessageRecord,
        at: u64,
        kind: EventKind,
        tx: &mut Tx,
    ) -> BrokerResult<()> {
        if !self.keeps_history() {
            return Ok(());
        }
        append(&mut tx.ws, rec, at, kind)
    }

    /// The history of the live or retained message `id` of `queue` at
    /// `now`: its kept events as the open group, else the engine, has
    /// them.
    pub fn history(
        &self,
        store: &Store,
        queue: &QueueName,
        id: &MessageId,
        now: u64,
    ) -> BrokerResult<History> {
        let rec = match self.lookup(store, queue, id)? {
            Some(rec) => rec,
            None => match self.lookup_retained(store, queue, id, now)? {
                Some(retained) => retained.message,
                None => {
                    return Err(BrokerError::MessageNotFound {
                        queue: queue.clone(),
                        id: id.clone(),
                    })
                }
            },
        };
        let mut events = Vec::with_capacity(HISTORY_LEN);
        let latest = rec.events.checked_sub(1);
        for n in kept(rec.events) {
            if n == 0 {
                events.push(Event {
                    at: rec.enqueued_at,
                    attempt: 0,
                    kind: EventKind::Enqueued,
                });
                continue;
            }
            if Some(n) == latest {
                events.extend(rec.last.as_deref().cloned());
                continue;
            }
            let key = codec::event_key(rec.seq, n);
            let found = match self.overlay(Space::Events, &key) {
                Some(Some(value)) => Some(codec::decode_record::<EventRecord>(value)),
                Some(None) => None,
                None => store.event(&key).transpose(),
            };
            if let Some(found) = found {
                events.push(found.map_err(store_err)?.event);
            }
        }
        let dropped = u64::from(rec.events) - kept(rec.events).len() as u64;
        Ok(History { events, dropped })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use delayd_core::testkit::support::{self as s};
    use delayd_core::{QueueConfigPatch, Reschedule, Schedule};

    use crate::store::Store;

    /// Events of the message with `seq` in the engine.
    fn stored_events(store: &Store, seq: u64) -> usize {
        (0..100)
            .filter(|&n| {
                let key = crate::codec::event_key(seq, n);
                store.event(&key).expect("read").is_some()
            })
            .count()
    }

    /// On disk a message keeps 31 of its last 32 events (the latest rides
    /// in its record; the one pushed out is deleted with the write that
    /// pushes it; event 0 is never stored), a retained message keeps its
    /// history, and an end without retention deletes it.
    #[test]
    fn the_store_keeps_the_last_32_and_deletes_with_the_message() {
        s::run_case_virtual_within(Duration::from_secs(600), |clock| async move {
            let (b, store, _dir) = crate::broker::open_for_test(clock).await;
            let q = s::queue("history_store", "q");
            let kept = s::queue("history_store", "kept");
            let patch = QueueConfigPatch {
                retain_ms: Some(3_600_000),
                ..QueueConfigPatch::default()
            };
            s::must(b.put_queue(&kept, patch).await, "put_queue");
            let m = s::put(&b, &q, s::req(Some("m"), Schedule::Delay(60_000), "x")).await;
            for i in 0..40 {
                let change = Reschedule {
                    schedule: Some(Schedule::Delay(60_000 + i)),
                    priority: None,
                };
                s::must(b.reschedule(&q, &m.id, change).await, "reschedule");
            }
            let r = s::put(&b, &kept, s::req(Some("r"), Schedule::Delay(60_000), "x")).await;
            for i in 0..2 {
                let change = Reschedule {
                    schedule: Some(Schedule::Delay(70_000 + i)),
                    priority: None,
                };
                s::must(b.reschedule(&kept, &r.id, change).await, "reschedule");
            }
            s::must(b.cancel(&kept, &r.id).await, "cancel");
            // Written to the engine by the sync thread.
            let settled =
                || stored_events(&store, m.seq) == 31 && stored_events(&store, r.seq) == 2;
            for _ in 0..200 {
                if settled() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(
                stored_events(&store, m.seq),
                31,
                "the last 32 but the latest"
            );
            // enqueued (implied), rescheduled twice (stored), cancelled (latest).
            assert_eq!(
                stored_events(&store, r.seq),
                2,
                "a retained message's history"
            );
            s::must(b.cancel(&q, &m.id).await, "cancel");
            for _ in 0..200 {
                if stored_events(&store, m.seq) == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(stored_events(&store, m.seq), 0, "deleted with its message");
            s::must(b.shutdown().await, "shutdown");
        });
    }
}
