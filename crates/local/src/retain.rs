//! Retention (api.md, "Retention, replace and debounce"): an acked or
//! cancelled message of a queue with `retain_ms` is kept on disk, without
//! its payload, until `ended_at + retain_ms`.
//!
//! Nothing of a retained message is in memory: its record lives in the
//! `retained` keyspace under its message key, and the `expiry` index
//! (`[until][seq]` → message key) finds it when its time is up. Reads
//! compare `until` with the call's time, so an id is free exactly then;
//! the sweeper ([`sweep`]) only reclaims the space, a batch at a time, off
//! the timer path. A queue's `retained_until` (the latest `until` it ever
//! wrote) spares an enqueue the disk read once nothing can be retained.

use std::sync::Arc;
use std::time::Duration;

use delayd_core::{BrokerResult, EventKind, Message, MessageId, MessageState, QueueName};

use crate::broker::Inner;
use crate::codec::{self, MessageRecord, RetainedRecord};
use crate::messages::store_err;
use crate::state::{State, Tx};
use crate::store::{Space, Store};

/// How often the sweeper looks for records whose time is up.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Records reclaimed per state-lock hold: each is one point read.
const SWEEP_BATCH: usize = 64;
/// Batches per look (the rest waits for the next look): up to 65,536
/// records reclaimed a second, more than the acks a second this store
/// takes, so a backlog shrinks; each batch is one lock hold, other calls
/// run between them.
const SWEEP_BATCHES: usize = 1024;

impl State {
    /// Ends `rec` (a live message of `queue`, already unlinked) at `now`
    /// as `how` (`Acked` or `Cancelled`): deleted with its history, or,
    /// when its queue retains ended messages, kept as a retained record
    /// whose history ends with the `acked` or `cancelled` event.
    pub fn end(
        &mut self,
        queue: &QueueName,
        rec: MessageRecord,
        how: MessageState,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<()> {
        debug_assert!(how.ended(), "{how} is not an end");
        let until = self
            .queue(queue)
            .ok()
            .and_then(|q| q.config().retained_until(now));
        let Some(until) = until else {
            return self.remove(queue, &rec, tx);
        };
        self.remove_record(queue, &rec, tx)?;
        let mut rec = rec;
        let event = match how {
            MessageState::Acked => EventKind::Acked,
            _ => EventKind::Cancelled,
        };
        self.append_event(&mut rec, now, event, tx)?;
        self.queue_mut(queue, tx)?.note_retained(until);
        let retained = RetainedRecord::new(&rec, how, now, until);
        let key = codec::message_key(queue, &rec.id);
        let value = codec::encode_record(&retained).map_err(store_err)?;
        tx.ws
            .put(Space::Expiry, codec::due_key(until, rec.seq), key.clone());
        tx.ws.put(Space::Retained, key, value);
        Ok(())
    }

    /// The retained message `id` of `queue` still kept at `now`, if any.
    pub fn lookup_retained(
        &self,
        store: &Store,
        queue: &QueueName,
        id: &MessageId,
        now: u64,
    ) -> BrokerResult<Option<RetainedRecord>> {
        let Some(q) = self.queues.get(queue) else {
            return Ok(None);
        };
        if !q.may_retain(now) {
            return Ok(None);
        }
        let found = self
            .stored_retained(store, &codec::message_key(queue, id))
            .map_err(store_err)?;
        Ok(found.filter(|r| r.until > now))
    }

    /// A retained record as stored: the open group's write, else the
    /// engine's.
    fn stored_retained(
        &self,
        store: &Store,
        key: &[u8],
    ) -> Result<Option<RetainedRecord>, crate::error::StoreError> {
        match self.overlay(Space::Retained, key) {
            Some(Some(value)) => codec::decode_record(value).map(Some),
            Some(None) => Ok(None),
            None => store.retained(key),
        }
    }

    /// Deletes the retained record `r` of `queue` with its history (a
    /// replace or debounce takes its id over); its `expiry` entry is left
    /// to the sweeper, which finds nothing or a later record.
    pub fn forget_retained(&self, queue: &QueueName, r: &RetainedRecord, tx: &mut Tx) {
        crate::history::forget(&mut tx.ws, &r.message);
        tx.ws
            .delete(Space::Retained, codec::message_key(queue, &r.message.id));
    }

    /// Deletes every retained record of `queue` (its deletion) with its
    /// history; their `expiry` entries are left to the sweeper, which
    /// finds nothing.
    pub fn delete_retained(
        &mut self,
        store: &Store,
        queue: &QueueName,
        tx: &mut Tx,
    ) -> BrokerResult<()> {
        for (key, r) in store.queue_retained(queue).map_err(store_err)? {
            crate::history::forget(&mut tx.ws, &r.message);
            tx.ws.delete(Space::Retained, key);
        }
        Ok(())
    }

    /// Reclaims the `expiry` entries `found` (read from the engine before
    /// the lock), each with the retained record it names when that record
    /// is the one whose time is up (not a later one of the same id).
    fn reclaim(&self, store: &Store, found: &[(u64, u64, Vec<u8>)], now: u64, tx: &mut Tx) {
        for (until, seq, key) in found {
            tx.ws.delete(Space::Expiry, codec::due_key(*until, *seq));
            match self.stored_retained(store, key) {
                Ok(Some(r)) if r.until <= now => {
                    crate::history::forget(&mut tx.ws, &r.message);
                    tx.ws.delete(Space::Retained, key.clone());
                }
                Ok(_) => {}
                // Unreadable: left for `delayd check` to name.
                Err(e) => tracing::warn!(error = %e, "retained record unreadable; kept"),
            }
        }
    }
}

/// The retained message as `get` shows it.
pub(crate) fn shown(queue: &QueueName, r: RetainedRecord) -> Message {
    let mut message = crate::messages::with_payload(queue, r.message, Vec::new());
    message.ended_at = Some(r.ended_at);
    message
}

/// The sweeper task: every [`SWEEP_EVERY`], deletes the retained records
/// whose time is up, [`SWEEP_BATCH`] per call.
pub(crate) async fn sweep(inner: Arc<Inner>) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(SWEEP_EVERY) => {}
            () = inner.stopped() => return,
        }
        // Each batch starts after the last one's entries: a scan from the
        // start would walk the tombstones this look left (an LSM's range
        // scan skips them one by one until they are compacted away). A new
        // entry is never before the cursor (its time is its end plus the
        // window), and each look starts from the beginning again.
        let mut from = (0, 0);
        for _ in 0..SWEEP_BATCHES {
            match sweep_batch(&inner, from).await {
                Ok(Some(next)) => from = next,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "sweeping retained messages failed; retrying");
                    break;
                }
            }
        }
    }
}

/// One batch from `from`; where the next starts when it was full (more may
/// be due).
async fn sweep_batch(inner: &Arc<Inner>, from: (u64, u64)) -> BrokerResult<Option<(u64, u64)>> {
    let now = inner.clock.now_ms();
    let store = Arc::clone(&inner.store);
    let found = tokio::task::spawn_blocking(move || store.expired(from, now, SWEEP_BATCH))
        .await
        .map_err(|e| delayd_core::BrokerError::unavailable(format!("sweeper read: {e}")))?
        .map_err(store_err)?;
    let next = match found.last() {
        Some(&(until, seq, _)) if found.len() == SWEEP_BATCH => {
            Some((until, seq.saturating_add(1)))
        }
        _ => None,
    };
    if found.is_empty() {
        return Ok(None);
    }
    inner
        .write(|state, store, _, tx| {
            state.reclaim(store, &found, now, tx);
            Ok(())
        })
        .await?;
    Ok(next)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use delayd_core::testkit::support::{self as s};
    use delayd_core::QueueConfigPatch;

    /// Retained records and their expiry entries are reclaimed from disk
    /// once their time is up: nothing of them is left.
    #[test]
    fn expired_records_are_reclaimed() {
        s::run_case_virtual_within(Duration::from_secs(600), |clock| async move {
            let (b, store, _dir) = crate::broker::open_for_test(clock).await;
            let q = s::queue("expired_records_are_reclaimed", "q");
            let patch = QueueConfigPatch {
                retain_ms: Some(2_000),
                ..QueueConfigPatch::default()
            };
            s::must(b.put_queue(&q, patch).await, "put_queue");
            // More than one sweep batch, acked and cancelled.
            for i in 0..150 {
                let id = format!("m{i}");
                let out = s::put_now(&b, &q, &id).await;
                if i % 2 == 0 {
                    s::must(b.cancel(&q, &out.id).await, "cancel");
                } else {
                    let d = s::lease_one(&b, &q, None).await;
                    s::must(b.ack(&q, &d.id, &d.lease_id).await, "ack");
                }
            }
            let kept = || {
                let expiry = store.expired((0, 0), u64::MAX, 1_000).expect("expiry");
                let retained = store.queue_retained(&q).expect("retained");
                (expiry.len(), retained.len())
            };
            // Written to the engine by the sync thread: wait for it.
            for _ in 0..100 {
                if kept() == (150, 150) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert_eq!(kept(), (150, 150), "every end retained");
            let mut left = kept();
            for _ in 0..60 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                left = kept();
                if left == (0, 0) {
                    break;
                }
            }
            assert_eq!(left, (0, 0), "reclaimed after their time");
            s::must(b.shutdown().await, "shutdown");
        });
    }
}
