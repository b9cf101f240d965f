//! Message history (api.md, "Message history") on the embedded store.
//!
//! Each transition appends one [`Event`] to the `events` keyspace under
//! `[seq][n]`, `n` counting the message's events from 0 (its record's
//! `events`), in the same write set as the transition; the event 32 back
//! is deleted in the same step, so a message keeps its last
//! [`HISTORY_LEN`]. Nothing of a history is in memory but the record's
//! count. A history ends with its message: deleted with it, or, when the
//! message is retained, kept until the sweeper reclaims the retained
//! record (module `retain`).

use delayd_core::{
    BrokerError, BrokerResult, Event, EventKind, History, MessageId, QueueName, HISTORY_LEN,
};

use crate::codec::{self, EventRecord, MessageRecord};
use crate::messages::store_err;
use crate::state::{State, Tx};
use crate::store::{Space, Store, WriteSet};

/// Appends `kind` at `at` to `rec`'s history (the attempt as `rec` has it
/// now, after the transition), dropping the event it pushes out.
fn append(
    ws: &mut WriteSet,
    rec: &mut MessageRecord,
    at: u64,
    kind: EventKind,
) -> BrokerResult<()> {
    let n = rec.events;
    let record = EventRecord {
        event: Event {
            at,
            attempt: rec.attempts,
            kind,
        },
    };
    let value = codec::encode_record(&record).map_err(store_err)?;
    ws.put(Space::Events, codec::event_key(rec.seq, n), value);
    rec.events = n.saturating_add(1);
    if let Some(out) = n.checked_sub(HISTORY_LEN as u32) {
        ws.delete(Space::Events, codec::event_key(rec.seq, out));
    }
    Ok(())
}

/// The numbers of the kept events of a message that appended `events`.
fn kept(events: u32) -> std::ops::Range<u32> {
    events.saturating_sub(HISTORY_LEN as u32)..events
}

/// Deletes the history of the message with `seq` (its kept events).
pub(crate) fn forget(ws: &mut WriteSet, seq: u64, events: u32) {
    for n in kept(events) {
        ws.delete(Space::Events, codec::event_key(seq, n));
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
        for n in kept(rec.events) {
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

    /// On disk a message keeps 32 events (the one pushed out is deleted
    /// with the write that pushes it), a retained message keeps its
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
            s::must(b.cancel(&kept, &r.id).await, "cancel");
            // Written to the engine by the sync thread.
            let settled =
                || stored_events(&store, m.seq) == 32 && stored_events(&store, r.seq) == 2;
            for _ in 0..200 {
                if settled() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(stored_events(&store, m.seq), 32, "the last 32");
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
