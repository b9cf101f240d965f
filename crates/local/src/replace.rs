//! Replace and debounce by id (api.md, "Retention, replace and debounce")
//! on the embedded store: the rules of `delayd_core::Replacement`.
//!
//! A successor (the request a replace or debounce of a leased message
//! leaves for when the lease ends) lives in memory in its queue's
//! `successors`, which holds at most one per lease (and every leased
//! message is in memory), and on disk in the `successors` keyspace under
//! its message key: written in the group of the enqueue that set it,
//! deleted in the group of the transition that applies or drops it, and
//! loaded back at recovery before the leases of the previous process
//! expire.

use delayd_core::{
    BrokerError, BrokerResult, EnqueueOutcome, EnqueueRequest, EventKind, MessageId, MessageState,
    OnConflict, QueueName, Replacement,
};

use crate::bounded_map::BoundedMap;
use crate::codec::{self, MessageRecord, SuccessorRecord};
use crate::messages::store_err;
use crate::state::{State, Tx};
use crate::store::Space;

/// The successors of a queue's leased messages, in memory and (through
/// the writes it adds to a call's group) on disk: the two copies change
/// together here and nowhere else.
#[derive(Default)]
pub(crate) struct Successors(BoundedMap<MessageId, Replacement>);

impl Successors {
    pub fn get(&self, id: &MessageId) -> Option<&Replacement> {
        self.0.get(id)
    }

    /// Sets (or overwrites) the successor of the message `id` of `queue`.
    pub fn set(
        &mut self,
        queue: &QueueName,
        id: &MessageId,
        next: Replacement,
        tx: &mut Tx,
    ) -> BrokerResult<()> {
        let record = SuccessorRecord { next };
        let value = codec::encode_record(&record).map_err(store_err)?;
        let next = record.next;
        tx.ws
            .put(Space::Successors, codec::message_key(queue, id), value);
        self.0.insert(id.clone(), next);
        Ok(())
    }

    /// Takes the successor of the message `id` of `queue` away (applied,
    /// or dropped with the message).
    pub fn take(&mut self, queue: &QueueName, id: &MessageId, tx: &mut Tx) -> Option<Replacement> {
        // Every lease's end asks: most queues have none, so no hashing.
        if self.0.is_empty() {
            return None;
        }
        let next = self.0.remove(id)?;
        tx.ws
            .delete(Space::Successors, codec::message_key(queue, id));
        Some(next)
    }

    /// A successor read back from disk (recovery).
    fn load(&mut self, id: MessageId, next: Replacement) {
        self.0.insert(id, next);
    }
}

impl State {
    /// An enqueue whose id names the live message `old` of `queue`: a
    /// duplicate (`keep`), or a replace or debounce: of a waiting message
    /// at once, of a leased one as its successor; a dead one is refused.
    pub fn conflict(
        &mut self,
        queue: &QueueName,
        old: MessageRecord,
        req: &EnqueueRequest,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<EnqueueOutcome> {
        let (id, seq) = (old.id.clone(), old.seq);
        if req.on_conflict == OnConflict::Keep {
            return Ok(EnqueueOutcome::duplicate(id, seq, old.deliver_at));
        }
        let mut new = old.clone();
        let (deliver_at, after_lease) = match old.state {
            MessageState::Dead => return Err(BrokerError::replace_dead(&id)),
            MessageState::Leased => {
                // The queue's record does not change: not marked dirty.
                let q = self
                    .queues
                    .get_mut(queue)
                    .ok_or_else(|| BrokerError::QueueNotFound(queue.clone()))?;
                let next = Replacement::successor(req, q.successors.get(&id), now);
                let deliver_at = next.deliver_at;
                q.successors.set(queue, &id, next, tx)?;
                (deliver_at, true)
            }
            MessageState::Scheduled | MessageState::Ready => {
                let next = Replacement::of(req, old.enqueued_at, now);
                take_content(queue, &mut new, &next, tx);
                new.deliver_at = next.deliver_at;
                new.state = MessageState::Scheduled;
                (next.deliver_at, false)
            }
            MessageState::Acked | MessageState::Cancelled => {
                debug_assert!(false, "an ended message among the live: {old:?}");
                return Ok(EnqueueOutcome::duplicate(id, seq, old.deliver_at));
            }
        };
        self.append_event(&mut new, now, EventKind::Replaced { after_lease }, tx)?;
        self.unlink(queue, &id);
        self.place(queue, Some(&old), new, now, tx)?;
        Ok(EnqueueOutcome::replaced(id, seq, deliver_at, after_lease))
    }

    /// The lease of `new` (a message of `queue`) ended at `at` in a retry
    /// or a death, its state set: its successor, if any, takes effect.
    /// After a retry it takes the successor's content and is due at the
    /// later of both times; after a death the successor takes its place
    /// (its content and due time, attempts 0: `redriven`).
    pub fn take_successor(
        &mut self,
        queue: &QueueName,
        new: &mut MessageRecord,
        at: u64,
        tx: &mut Tx,
    ) -> BrokerResult<()> {
        let Some(next) = self.remove_successor(queue, &new.id, tx) else {
            return Ok(());
        };
        take_content(queue, new, &next, tx);
        if new.state == MessageState::Dead {
            new.deliver_at = next.deliver_at;
            new.attempts = 0;
            new.deferrals = 0;
            new.died_at = None;
            new.state = MessageState::Scheduled;
            self.append_event(new, at, EventKind::Redriven, tx)?;
        } else {
            new.deliver_at = new.deliver_at.max(next.deliver_at);
            new.state = MessageState::Scheduled;
        }
        Ok(())
    }

    /// Forgets the successor of the message `id` of `queue` (applied, or
    /// dropped with the message), memory and disk; returns it.
    pub fn remove_successor(
        &mut self,
        queue: &QueueName,
        id: &MessageId,
        tx: &mut Tx,
    ) -> Option<Replacement> {
        self.queues.get_mut(queue)?.successors.take(queue, id, tx)
    }

    /// Loads the successors on disk into memory (recovery: before the
    /// leases of the previous process expire). Returns how many.
    pub fn load_successors(
        &mut self,
        found: Vec<(Vec<u8>, SuccessorRecord)>,
    ) -> Result<u64, crate::error::StoreError> {
        let mut loaded = 0;
        for (key, record) in found {
            let (queue, id) = codec::decode_message_key(&key)?;
            if let Some(q) = self.queues.get_mut(&queue) {
                q.successors.load(id, record.next);
                loaded += 1;
            }
        }
        Ok(loaded)
    }
}

/// Puts `next`'s content on `rec` (the payload as a write under its seq;
/// a payload is rewritten only while its message is not leased, so a
/// delivery reads the payload it was leased with).
fn take_content(queue: &QueueName, rec: &mut MessageRecord, next: &Replacement, tx: &mut Tx) {
    rec.headers = next.headers.clone();
    rec.priority = next.priority;
    rec.key = next.key.clone();
    rec.max_attempts = next.max_attempts;
    rec.lease_ms = next.lease_ms;
    crate::messages::write_payload(queue, &rec.id, rec.seq, &next.payload, tx);
}
