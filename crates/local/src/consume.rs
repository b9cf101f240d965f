//! Transitions of consuming: lease, ack, nack, bury, extend, and a lease
//! running out. Each runs under the state lock.

use delayd_core::{
    metric, metric::Stage, BrokerError, BrokerResult, DeathReason, Delivery, EventKind, LeaseId,
    MessageId, MessageState, Nack, QueueName, Via,
};

use crate::codec::{self, MessageRecord};
use crate::messages::store_err;
use crate::state::{State, Tx};
use crate::store::{Space, Store};
use crate::waiters::HandOff;

/// Deliveries (or the failure) for a waiting lease call, sent once the
/// call's group is known, and whether they must wait for its fsync (see
/// [`crate::state::Tx::reads_undurable`]).
pub(crate) type Serving = (HandOff, BrokerResult<Vec<Leased>>, bool);

/// A delivery made under the state lock, whose payload is read after the
/// lock is released: no engine read delays the other calls (a lease of
/// thousands of messages read each payload under the lock).
pub(crate) struct Leased {
    delivery: Delivery,
    payload: PayloadAt,
}

/// Where a leased message's payload is.
enum PayloadAt {
    /// Taken from the open group or the group in flight (under the lock:
    /// those are released with it).
    Held(Vec<u8>),
    /// In the engine, under the delivery's seq. A payload is rewritten
    /// only by a replace of a message that is not leased (module
    /// `replace`), so reading it later reads the bytes it was leased with
    /// (unless its lease ended meanwhile: then the delivery is void).
    Engine,
}

impl Leased {
    /// The delivery with its payload, read from the engine if need be
    /// (outside the state lock). `None` when the message ended between its
    /// lease and this read (cancelled, or its queue deleted): its lease is
    /// void, and handing it out would deliver a message that is gone.
    fn fill(self, store: &Store) -> BrokerResult<Option<Delivery>> {
        let Leased {
            mut delivery,
            payload,
        } = self;
        delivery.payload = match payload {
            PayloadAt::Held(payload) => payload,
            PayloadAt::Engine => match store.payload(delivery.seq).map_err(store_err)? {
                Some((_, payload)) => payload,
                None => return Ok(None),
            },
        };
        Ok(Some(delivery))
    }
}

/// The deliveries of a lease, their payloads read outside the state lock
/// (see [`Leased`]).
pub(crate) fn fill(store: &Store, leased: Vec<Leased>) -> BrokerResult<Vec<Delivery>> {
    let mut out = Vec::with_capacity(leased.len());
    for one in leased {
        out.extend(one.fill(store)?);
    }
    Ok(out)
}

/// How a delivery failed.
pub(crate) struct Failure {
    pub delay_ms: Option<u64>,
    pub priority: Option<u32>,
    pub may_die: bool,
    /// Its history event: `expired` (a lease that ran out), `nacked` or
    /// `push_failed`.
    pub event: EventKind,
    /// When it failed: the call's `now` for a nack, the deadline for an
    /// expired lease (api.md: the backoff counts from the expiry).
    pub at: u64,
}

impl State {
    /// The delivery of a record leased at `now`, its payload to be read
    /// after the lock is released (its lateness recorded in `leased`, the
    /// `Stage::Leased` histogram the caller looked up once for its batch).
    pub fn delivery(
        &self,
        queue: QueueName,
        rec: MessageRecord,
        now: u64,
        leased: &metric::Lateness,
    ) -> BrokerResult<Leased> {
        leased.record(now, rec.deliver_at);
        let payload = match self.overlay(Space::Payloads, &codec::seq_key(rec.seq)) {
            Some(Some(value)) => {
                let (_, payload) = codec::decode_payload(value).map_err(store_err)?;
                PayloadAt::Held(payload.to_vec())
            }
            // Deleted in a group not yet written: the message has none.
            Some(None) => PayloadAt::Held(Vec::new()),
            None => PayloadAt::Engine,
        };
        let delivery = Delivery {
            key: rec.key.clone(),
            queue,
            id: rec.id,
            seq: rec.seq,
            lease_id: rec.lease_id.unwrap_or_else(LeaseId::generate),
            lease_until: rec.lease_until.unwrap_or(0),
            attempt: rec.attempts,
            deliver_at: rec.deliver_at,
            priority: rec.priority,
            headers: rec.headers,
            payload: Vec::new(),
        };
        Ok(Leased { delivery, payload })
    }

    /// Leases the messages that became ready in this call (`tx.ready_queues`)
    /// to the calls waiting on their queues, longest-waiting first, each up
    /// to its `max`. Runs under the lock before the call's writes join the
    /// commit group, so the leases are in the same group.
    pub fn serve_waiters(&mut self, now: u64, tx: &mut Tx) -> Vec<Serving> {
        let queues = std::mem::take(&mut tx.ready_queues);
        let mut served = Vec::new();
        for queue in &queues {
            while self.first_ready(std::slice::from_ref(queue), now).is_some() {
                let Some((id, waiter)) = self.waiters.pop(queue) else {
                    break;
                };
                // Whether this waiter's messages need the fsync, apart
                // from the other waiters'.
                let others = std::mem::take(&mut tx.reads_undurable);
                let leased = self.lease_ready(
                    &waiter.queues,
                    waiter.max,
                    waiter.lease_ms,
                    waiter.via,
                    now,
                    tx,
                );
                let undurable = std::mem::replace(&mut tx.reads_undurable, others);
                match leased {
                    Ok(leased) if leased.is_empty() => {
                        debug_assert!(false, "{queue} has a ready message but none was leased");
                        self.waiters.restore(id, waiter);
                        break;
                    }
                    Ok(leased) => {
                        let histogram = metric::Lateness::of(Stage::Leased);
                        let deliveries = leased
                            .into_iter()
                            .map(|(q, rec)| self.delivery(q, rec, now, &histogram))
                            .collect();
                        served.push((waiter.sender, deliveries, undurable));
                    }
                    Err(e) => served.push((waiter.sender, Err(e), false)),
                }
            }
        }
        served
    }

    /// Leases one message (any state but leased) to a consumer.
    pub fn lease_record(
        &mut self,
        queue: &QueueName,
        old: MessageRecord,
        lease_ms: Option<u64>,
        via: Via,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<MessageRecord> {
        let config_lease = self.queue(queue)?.config().lease_ms;
        let lease_ms = lease_ms.or(old.lease_ms).unwrap_or(config_lease);
        tx.reads_undurable |= self.write_pending(queue, &old.id);
        self.flow_take(queue, &old, now);
        let mut new = old.clone();
        new.state = MessageState::Leased;
        new.attempts = new.attempts.saturating_add(1);
        let lease_until = now.saturating_add(lease_ms);
        new.lease_until = Some(lease_until);
        new.lease_id = Some(LeaseId::generate());
        new.died_at = None;
        let event = EventKind::Leased { lease_until, via };
        self.append_event(&mut new, now, event, tx)?;
        self.unlink(queue, &old.id);
        self.place(queue, Some(&old), new.clone(), now, tx)?;
        Ok(new)
    }

    /// Takes up to `max` ready messages from `queues` in delivery order.
    pub fn lease_ready(
        &mut self,
        queues: &[QueueName],
        max: u32,
        lease_ms: Option<u64>,
        via: Via,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<Vec<(QueueName, MessageRecord)>> {
        let mut out = Vec::new();
        while out.len() < max as usize {
            let Some((queue, id)) = self.first_ready(queues, now) else {
                break;
            };
            let Some(old) = self
                .queues
                .get(&queue)
                .and_then(|q| q.messages.get(&id))
                .cloned()
            else {
                break;
            };
            let leased = self.lease_record(&queue, old, lease_ms, via, now, tx)?;
            out.push((queue, leased));
            // The key's next message may go out in the same call.
            self.refresh_flow(now, tx);
        }
        Ok(out)
    }

    /// The message, if `lease` is its current lease. A lease that ran out
    /// is not current: the call settled time first (`Inner::catch_up`),
    /// which failed it as of its expiry.
    pub fn check_lease(
        &self,
        store: &Store,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        tx: &Tx,
    ) -> BrokerResult<MessageRecord> {
        let rec = self.lookup_in(store, queue, id, Some(tx))?.ok_or_else(|| {
            BrokerError::MessageNotFound {
                queue: queue.clone(),
                id: id.clone(),
            }
        })?;
        if rec.state != MessageState::Leased || rec.lease_id.as_ref() != Some(lease) {
            return Err(BrokerError::LeaseMismatch {
                id: id.clone(),
                lease: lease.to_string(),
            });
        }
        Ok(rec)
    }

    pub fn ack(
        &mut self,
        store: &Store,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<()> {
        let rec = self.check_lease(store, queue, id, lease, tx)?;
        self.ack_leased(queue, rec, now, tx)
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "mirrors Broker::nack plus the call context"
    )]
    pub fn nack(
        &mut self,
        store: &Store,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        nack: Nack,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<()> {
        nack.validate()?;
        let mut rec = self.check_lease(store, queue, id, lease, tx)?;
        if let Some(error) = nack.error_text() {
            rec.last_error = Some(error.into());
        }
        if nack.defer {
            return self.defer(queue, rec, nack, now, tx);
        }
        let failure = Failure {
            delay_ms: nack.delay_ms,
            priority: nack.priority,
            may_die: nack.may_die,
            event: nack.event(),
            at: now,
        };
        self.fail(queue, rec, failure, now, tx)
    }

    /// A deferred delivery (nack `defer`): the attempt is given back and
    /// the deferral rule of `delayd_core::flow` decides; the key (or the
    /// queue) cools down until the message is due again.
    fn defer(
        &mut self,
        queue: &QueueName,
        old: MessageRecord,
        nack: Nack,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<()> {
        let config = self.queue(queue)?.config().clone();
        let Some(flow) = &config.flow else {
            return Err(BrokerError::defer_without_flow(queue));
        };
        let deferred = flow.deferred(
            &config.retry,
            old.attempts,
            old.deferrals,
            nack.delay_ms,
            now,
        );
        let mut new = old.clone();
        new.lease_until = None;
        new.lease_id = None;
        new.attempts = deferred.attempts;
        new.deferrals = deferred.deferrals;
        if let Some(priority) = nack.priority {
            new.priority = priority;
        }
        metrics::counter!(metric::FLOW_DEFERRALS_TOTAL, "queue" => queue.to_string()).increment(1);
        let event = match deferred.verdict {
            delayd_core::Deferral::Dead => {
                new.state = MessageState::Dead;
                new.died_at = Some(now);
                new.counters.buries += 1;
                metrics::counter!(metric::DEAD_LETTERED_TOTAL, "queue" => queue.to_string())
                    .increment(1);
                EventKind::Dead {
                    reason: DeathReason::MaxDeferrals,
                }
            }
            delayd_core::Deferral::Again { deliver_at } => {
                new.state = MessageState::Scheduled;
                new.deliver_at = deliver_at;
                EventKind::Deferred {
                    until: deliver_at,
                    reason: nack.defer_reason(),
                }
            }
        };
        self.append_event(&mut new, now, event, tx)?;
        // The cooldown is the deferred key's, whatever a successor brings.
        let key = new.key.clone();
        self.take_successor(queue, &mut new, now, tx)?;
        self.unlink(queue, &old.id);
        self.place(queue, Some(&old), new, now, tx)?;
        if let Some(until) = deferred.cools_until() {
            self.cool_down(queue, key.as_ref(), until);
        }
        Ok(())
    }

    /// A failed delivery: back to scheduled after the delay or backoff, or
    /// dead when out of attempts.
    pub fn fail(
        &mut self,
        queue: &QueueName,
        old: MessageRecord,
        failure: Failure,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<()> {
        let config = self.queue(queue)?.config().clone();
        let mut new = old.clone();
        new.lease_until = None;
        new.lease_id = None;
        // A failure ends a run of deferrals.
        new.deferrals = 0;
        if let Some(priority) = failure.priority {
            new.priority = priority;
        }
        let timed_out = failure.event == EventKind::Expired;
        self.append_event(&mut new, failure.at, failure.event, tx)?;
        if timed_out {
            new.counters.timeouts += 1;
            metrics::counter!(metric::LEASES_EXPIRED_TOTAL, "queue" => queue.to_string())
                .increment(1);
        } else {
            new.counters.releases += 1;
        }
        if failure.may_die && config.exhausted(new.attempts, new.max_attempts) {
            new.state = MessageState::Dead;
            new.died_at = Some(failure.at);
            new.counters.buries += 1;
            let reason = DeathReason::MaxAttempts;
            self.append_event(&mut new, failure.at, EventKind::Dead { reason }, tx)?;
            metrics::counter!(metric::DEAD_LETTERED_TOTAL, "queue" => queue.to_string())
                .increment(1);
        } else {
            let delay = failure
                .delay_ms
                .unwrap_or_else(|| config.retry.delay_with_jitter(new.attempts));
            new.state = MessageState::Scheduled;
            new.deliver_at = failure.at.saturating_add(delay);
        }
        self.take_successor(queue, &mut new, failure.at, tx)?;
        self.unlink(queue, &old.id);
        self.place(queue, Some(&old), new, now, tx)
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "mirrors Broker::bury plus the call context"
    )]
    pub fn bury(
        &mut self,
        store: &Store,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        priority: Option<u32>,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<()> {
        let old = self.check_lease(store, queue, id, lease, tx)?;
        let mut new = old.clone();
        new.state = MessageState::Dead;
        new.died_at = Some(now);
        new.lease_until = None;
        new.lease_id = None;
        new.counters.buries += 1;
        if let Some(priority) = priority {
            new.priority = priority;
        }
        let reason = DeathReason::Buried;
        self.append_event(&mut new, now, EventKind::Dead { reason }, tx)?;
        self.take_successor(queue, &mut new, now, tx)?;
        self.unlink(queue, id);
        self.place(queue, Some(&old), new, now, tx)
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "mirrors Broker::extend plus the call context"
    )]
    pub fn extend(
        &mut self,
        store: &Store,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        lease_ms: Option<u64>,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<u64> {
        let old = self.check_lease(store, queue, id, lease, tx)?;
        let config_lease = self.queue(queue)?.config().lease_ms;
        let lease_ms = lease_ms.or(old.lease_ms).unwrap_or(config_lease);
        let mut new = old.clone();
        let until = now.saturating_add(lease_ms);
        new.lease_until = Some(until);
        self.unlink(queue, id);
        self.place(queue, Some(&old), new, now, tx)?;
        Ok(until)
    }

    /// A lease timer fired at `deadline`: if it is still the message's
    /// lease, the delivery failed.
    pub fn expire_lease(
        &mut self,
        queue: &QueueName,
        id: &MessageId,
        deadline: u64,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<()> {
        let Some(rec) = self
            .queues
            .get(queue)
            .and_then(|q| q.messages.get(id))
            .cloned()
        else {
            return Ok(());
        };
        if rec.state != MessageState::Leased || rec.lease_until != Some(deadline) {
            return Ok(());
        }
        let failure = Failure {
            delay_ms: None,
            priority: None,
            may_die: true,
            event: EventKind::Expired,
            at: deadline,
        };
        self.fail(queue, rec, failure, now, tx)
    }
}
