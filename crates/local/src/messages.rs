//! Transitions of the message calls: enqueue, cancel, reschedule, redrive,
//! and the read-side views (get, list). Each runs under the state lock.

use delayd_core::{
    BrokerError, BrokerResult, EnqueueOutcome, EnqueueRequest, EventKind, ListQuery, Message,
    MessageCounters, MessageId, MessageState, OnConflict, QueueName, Redrive, Reschedule,
    DEFAULT_PRIORITY,
};

use crate::codec::{self, MessageRecord};
use crate::state::{State, Tx};
use crate::store::{Space, Store};

pub(crate) fn store_err(e: crate::error::StoreError) -> BrokerError {
    BrokerError::Unavailable {
        reason: e.to_string(),
        maybe_applied: false,
    }
}

/// Writes `payload` as the payload of the message `id` (`seq`) of `queue`.
pub(crate) fn write_payload(
    queue: &QueueName,
    id: &MessageId,
    seq: u64,
    payload: &[u8],
    tx: &mut Tx,
) {
    let key = codec::message_key(queue, id);
    tx.ws.put(
        Space::Payloads,
        codec::seq_key(seq),
        codec::encode_payload(&key, payload),
    );
}

impl State {
    pub fn enqueue_one(
        &mut self,
        store: &Store,
        queue: &QueueName,
        mut req: EnqueueRequest,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<EnqueueOutcome> {
        req.validate()?;
        delayd_core::check_deliver_at(req.deliver_at(now))?;
        let id = match req.id.take() {
            Some(id) => {
                if let Some(live) = self.lookup_in(store, queue, &id, Some(tx))? {
                    return self.conflict(queue, live, &req, now, tx);
                }
                // A retained message holds its id for `keep` only; a
                // replace or debounce takes the id over.
                if let Some(r) = self.lookup_retained(store, queue, &id, now)? {
                    if req.on_conflict == OnConflict::Keep {
                        let m = r.message;
                        return Ok(EnqueueOutcome::duplicate(id, m.seq, m.deliver_at));
                    }
                    self.forget_retained(queue, &r, tx);
                }
                id
            }
            None => MessageId::generate(),
        };
        self.insert_message(queue, id, req, now, tx)
    }

    /// Stores a new message `id` (known not to be live in `queue`).
    pub fn insert_message(
        &mut self,
        queue: &QueueName,
        id: MessageId,
        req: EnqueueRequest,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<EnqueueOutcome> {
        let seq = self.allocate_seq(tx);
        let deliver_at = req.deliver_at(now);
        let record = MessageRecord {
            id: id.clone(),
            seq,
            state: MessageState::Scheduled,
            deliver_at,
            enqueued_at: now,
            priority: req.priority.unwrap_or(DEFAULT_PRIORITY),
            attempts: 0,
            max_attempts: req.max_attempts,
            lease_ms: req.lease_ms,
            lease_until: None,
            lease_id: None,
            died_at: None,
            counters: MessageCounters::default(),
            headers: req.headers,
            key: req.key,
            deferrals: 0,
            last_error: None,
            events: 0,
            last: None,
        };
        let mut record = record;
        self.append_event(&mut record, now, EventKind::Enqueued, tx)?;
        write_payload(queue, &id, seq, &req.payload, tx);
        self.place(queue, None, record, now, tx)?;
        Ok(EnqueueOutcome::created(id, seq, deliver_at))
    }

    /// A leased message's ack at `now`: it ends (retained when its queue
    /// keeps ended messages), unless it has a successor: then it is
    /// deleted and the successor enqueued as a new message with its id.
    pub fn ack_leased(
        &mut self,
        queue: &QueueName,
        rec: MessageRecord,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<()> {
        self.unlink(queue, &rec.id);
        let Some(next) = self.remove_successor(queue, &rec.id, tx) else {
            return self.end(queue, rec, MessageState::Acked, now, tx);
        };
        self.remove(queue, &rec, tx)?;
        let request = next.into_request(rec.id.clone());
        self.insert_message(queue, rec.id, request, now, tx)?;
        Ok(())
    }

    /// A client's cancel: the message ends (retained when its queue keeps
    /// ended messages).
    pub fn cancel(
        &mut self,
        store: &Store,
        queue: &QueueName,
        id: &MessageId,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<()> {
        let rec = self.lookup_existing(store, queue, id, tx)?;
        self.unlink(queue, id);
        self.end(queue, rec, MessageState::Cancelled, now, tx)
    }

    /// Deletes a live message (never retained: a schedule's change takes
    /// back a fire it wrote ahead, as the model does); returns its record.
    pub fn drop_message(
        &mut self,
        store: &Store,
        queue: &QueueName,
        id: &MessageId,
        tx: &mut Tx,
    ) -> BrokerResult<MessageRecord> {
        let rec = self.lookup_existing(store, queue, id, tx)?;
        self.unlink(queue, id);
        self.remove(queue, &rec, tx)?;
        Ok(rec)
    }

    pub fn reschedule(
        &mut self,
        store: &Store,
        queue: &QueueName,
        id: &MessageId,
        change: Reschedule,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<MessageRecord> {
        let old = self.lookup_existing(store, queue, id, tx)?;
        if matches!(old.state, MessageState::Leased | MessageState::Dead) {
            return Err(BrokerError::InvalidState {
                id: id.clone(),
                state: old.state,
                reason: "only scheduled and ready messages can be rescheduled",
            });
        }
        let mut new = old.clone();
        if let Some(schedule) = change.schedule {
            new.deliver_at = delayd_core::check_deliver_at(schedule.deliver_at(now))?;
        }
        if let Some(priority) = change.priority {
            new.priority = priority;
        }
        // The state `place` gives it: the answer must be the changed
        // message, also when it moves beyond the horizon (then it is on
        // disk only, and the engine does not have this call's write yet).
        new.state = if new.deliver_at <= now {
            MessageState::Ready
        } else {
            MessageState::Scheduled
        };
        self.append_event(&mut new, now, EventKind::Rescheduled, tx)?;
        self.unlink(queue, id);
        self.place(queue, Some(&old), new.clone(), now, tx)?;
        Ok(new)
    }

    pub fn redrive(
        &mut self,
        queue: &QueueName,
        which: Redrive,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<u64> {
        let mut dead = self.dead_in_order(queue)?;
        let chosen: Vec<MessageRecord> = match which {
            Redrive::All => dead,
            Redrive::Oldest(n) => {
                dead.truncate(usize::try_from(n).unwrap_or(usize::MAX));
                dead
            }
            Redrive::Ids(ids) => dead.into_iter().filter(|r| ids.contains(&r.id)).collect(),
        };
        for old in &chosen {
            let mut new = old.clone();
            new.state = MessageState::Ready;
            new.attempts = 0;
            new.deferrals = 0;
            new.died_at = None;
            new.counters.kicks += 1;
            // Ready now: a redriven message is due at once.
            new.deliver_at = new.deliver_at.min(now);
            self.append_event(&mut new, now, EventKind::Redriven, tx)?;
            self.unlink(queue, &old.id);
            self.place(queue, Some(old), new, now, tx)?;
        }
        Ok(chosen.len() as u64)
    }

    fn dead_in_order(&self, queue: &QueueName) -> BrokerResult<Vec<MessageRecord>> {
        let q = self.queue(queue)?;
        let mut dead: Vec<MessageRecord> = q
            .messages
            .values()
            .filter(|r| r.state == MessageState::Dead)
            .cloned()
            .collect();
        dead.sort_by_key(|r| (r.died_at, r.seq));
        Ok(dead)
    }

    pub fn to_message(
        &self,
        store: &Store,
        queue: &QueueName,
        rec: MessageRecord,
    ) -> BrokerResult<Message> {
        let payload = self.payload_of(store, rec.seq)?;
        Ok(with_payload(queue, rec, payload))
    }

    /// A message's payload (empty when it has none stored).
    pub fn payload_of(&self, store: &Store, seq: u64) -> BrokerResult<Vec<u8>> {
        Ok(self
            .stored_payload(store, seq)
            .map_err(store_err)?
            .map(|(_, p)| p)
            .unwrap_or_default())
    }

    pub fn get_by_seq(&self, store: &Store, seq: u64) -> BrokerResult<Option<Message>> {
        let Some((key, payload)) = self.stored_payload(store, seq).map_err(store_err)? else {
            return Ok(None);
        };
        let (queue, id) = codec::decode_message_key(&key).map_err(store_err)?;
        // The payload came with the key: not read a second time.
        match self.lookup(store, &queue, &id)? {
            Some(rec) if rec.seq == seq => Ok(Some(with_payload(&queue, rec, payload))),
            _ => Ok(None),
        }
    }

    pub fn list(
        &self,
        store: &Store,
        queue: &QueueName,
        query: ListQuery,
    ) -> BrokerResult<Vec<Message>> {
        let q = self.queue(queue)?;
        let limit = query.limit as usize;
        let records: Vec<MessageRecord> = match query.state {
            MessageState::Scheduled => {
                self.list_scheduled(store, queue, query.after.as_ref(), limit)?
            }
            state => {
                let mut all: Vec<&MessageRecord> =
                    q.messages.values().filter(|r| r.state == state).collect();
                all.sort_by_key(|r| match state {
                    MessageState::Ready => (u64::from(r.priority), r.deliver_at, r.seq),
                    MessageState::Leased => (r.lease_until.unwrap_or(0), r.seq, 0),
                    _ => (r.died_at.unwrap_or(0), r.seq, 0),
                });
                let start = match &query.after {
                    Some(after) => all.iter().position(|r| &r.id == after).map_or(0, |p| p + 1),
                    None => 0,
                };
                all.into_iter().skip(start).take(limit).cloned().collect()
            }
        };
        records
            .into_iter()
            .map(|rec| self.to_message(store, queue, rec))
            .collect()
    }

    /// Scheduled messages by (deliver_at, seq): the `due` index holds
    /// exactly the stored-scheduled ones (ready ones included, skipped here).
    fn list_scheduled(
        &self,
        store: &Store,
        queue: &QueueName,
        after: Option<&MessageId>,
        limit: usize,
    ) -> BrokerResult<Vec<MessageRecord>> {
        let mut from = (0u64, 0u64);
        if let Some(after) = after {
            if let Some(rec) = self.lookup(store, queue, after)? {
                if rec.state == MessageState::Scheduled {
                    from = (rec.deliver_at, rec.seq.saturating_add(1));
                }
            }
        }
        let mut out = Vec::new();
        let prefix = codec::queue_prefix(queue);
        while out.len() < limit {
            let chunk = store.due_range(from, u64::MAX, 1024).map_err(store_err)?;
            for (at, seq, key) in &chunk {
                from = (*at, seq.saturating_add(1));
                if !key.starts_with(&prefix) || key.len() <= prefix.len() {
                    continue;
                }
                let (_, id) = codec::decode_message_key(key).map_err(store_err)?;
                if let Some(rec) = self.lookup(store, queue, &id)? {
                    if rec.state == MessageState::Scheduled && out.len() < limit {
                        out.push(rec);
                    }
                }
            }
            if chunk.len() < 1024 {
                break;
            }
        }
        Ok(out)
    }
}

/// The message `rec` describes, with its payload.
pub(crate) fn with_payload(queue: &QueueName, rec: MessageRecord, payload: Vec<u8>) -> Message {
    Message {
        deferrals: rec.deferrals,
        key: rec.key,
        last_error: rec.last_error.map(String::from),
        queue: queue.clone(),
        id: rec.id,
        seq: rec.seq,
        state: rec.state,
        deliver_at: rec.deliver_at,
        enqueued_at: rec.enqueued_at,
        priority: rec.priority,
        attempts: rec.attempts,
        max_attempts: rec.max_attempts,
        lease_ms: rec.lease_ms,
        lease_until: rec.lease_until,
        died_at: rec.died_at,
        counters: rec.counters,
        headers: rec.headers,
        payload,
        ended_at: None,
    }
}
