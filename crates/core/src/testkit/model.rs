//! [`ModelBroker`]: the reference implementation of [`Broker`], in memory,
//! written for obviousness rather than speed. Property tests of the real
//! brokers compare against it, and it must pass the conformance suite.
//!
//! Every call takes the one lock, first applies what time alone has caused
//! (`State::settle`, schedules fired included), then does its work. Lease
//! calls that have to wait sleep until the next moment something can change
//! by itself (a message due, a lease expiring, a pause ending, a schedule
//! firing) or until another call changes the state and wakes them through a
//! [`Notify`]. The model has no timers and no background task: a schedule
//! fires when the next call (or a waiting lease waking at its cursor) gets
//! to it, at the moment a timer would have (module `firing`).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::state::{self, State};
use crate::broker::{Broker, Upsert};
use crate::clock::{Clock, SystemClock};
use crate::error::{BrokerError, BrokerResult};
use crate::events::{DeathReason, EventKind, History, Via};
use crate::flow::{FlowKey, KeyInfo};
use crate::message::{
    Delivery, EnqueueOptions, EnqueueOutcome, EnqueueRequest, LeaseRequest, ListQuery, Message,
    MessageState, Nack, Redrive, Reschedule,
};
use crate::model::{LeaseId, MessageId, QueueConfig, QueueConfigPatch, QueueInfo, QueueName};
use crate::recurring::{ScheduleDefinition, ScheduleId, ScheduleRecord};

/// The in-memory reference broker. See the module docs.
pub struct ModelBroker {
    clock: Arc<dyn Clock>,
    // A std mutex: no await point is ever reached while it is held.
    state: Mutex<State>,
    /// Wakes waiting lease calls after any change that could make a message
    /// ready (or end the wait: shutdown, queue deleted).
    changed: Notify,
}

impl Default for ModelBroker {
    fn default() -> Self {
        Self::new()
    }
}

impl ModelBroker {
    /// A model on the system wall clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            state: Mutex::new(State::default()),
            changed: Notify::new(),
        }
    }

    /// Locks the state, refuses calls after shutdown, and settles time.
    /// Returns the guard and the wall time the call works at.
    fn open(&self) -> BrokerResult<(MutexGuard<'_, State>, u64)> {
        let mut state = self.lock();
        state.check_open()?;
        let now = self.clock.now_ms();
        if state.settle(now, Instant::now()) {
            self.changed.notify_waiters();
        }
        state.debug_check(now);
        Ok((state, now))
    }

    /// What a restart does to a lease held when the server stopped
    /// (api.md, "Crash and shutdown"): it comes back as an expired lease,
    /// a failed attempt from now. For tests that restart a real broker
    /// beside the model.
    pub fn expire_at_restart(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
    ) -> BrokerResult<()> {
        let (mut state, now) = self.open()?;
        let config = state.config(queue)?;
        let stored = state.leased_mut(queue, id, lease)?;
        state::expire(stored, &config, now);
        if stored.msg.state == MessageState::Scheduled && stored.msg.deliver_at <= now {
            stored.msg.state = MessageState::Ready;
        }
        self.changed.notify_waiters();
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock can only come from a bug in the
        // model itself; its state is still the best we have, so keep going.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One attempt of a lease call: what is ready now, or when to look
    /// again. Empty at once after shutdown, or when one of the `watched`
    /// queues (those that existed when the call began) was deleted.
    fn try_lease(
        &self,
        queues: &[QueueName],
        request: &LeaseRequest,
        via: Via,
        watched: &[(QueueName, u64)],
    ) -> BrokerResult<Result<Vec<Delivery>, Option<u64>>> {
        let mut guard = self.lock();
        if guard.shut_down || !guard.all_alive(watched) {
            return Ok(Ok(Vec::new()));
        }
        let now = self.clock.now_ms();
        if guard.settle(now, Instant::now()) {
            self.changed.notify_waiters();
        }
        let state = &mut *guard;
        let (keys, held_until) = state.deliverable(queues, request.max as usize, now);
        if keys.is_empty() {
            let next = state.next_event(queues, now);
            let next = match (next, held_until) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            return Ok(Err(next));
        }
        let mut out = Vec::new();
        for key in keys {
            let queue_lease = state.config(&key.0)?.lease_ms;
            let stored = state.stored_mut(&key.0, &key.1)?;
            let lease_ms = request
                .lease_ms
                .or(stored.msg.lease_ms)
                .unwrap_or(queue_lease);
            out.push(state::deliver(stored, now, lease_ms, via));
        }
        Ok(Ok(out))
    }
}

#[async_trait]
impl Broker for ModelBroker {
    async fn put_queue(
        &self,
        queue: &QueueName,
        patch: QueueConfigPatch,
    ) -> BrokerResult<(Upsert, QueueInfo)> {
        let (mut state, now) = self.open()?;
        let current = state.queues.get(queue).map(|q| q.config.clone());
        let upsert = if current.is_some() {
            Upsert::Updated
        } else {
            Upsert::Created
        };
        let config = patch.resolve(current.as_ref())?;
        state.create_queue(queue, config.clone());
        if let Some(q) = state.queues.get_mut(queue) {
            if config.flow.is_none() {
                q.flow = Default::default();
            }
            q.config = config;
        }
        // Changed limits apply to messages already waiting.
        self.changed.notify_waiters();
        Ok((upsert, state.info(queue, now)?))
    }

    async fn get_queue(&self, queue: &QueueName) -> BrokerResult<QueueInfo> {
        let (state, now) = self.open()?;
        state.info(queue, now)
    }

    async fn list_queues(&self) -> BrokerResult<Vec<QueueInfo>> {
        let (state, now) = self.open()?;
        state.queues.keys().map(|q| state.info(q, now)).collect()
    }

    async fn delete_queue(&self, queue: &QueueName) -> BrokerResult<()> {
        let (mut state, _) = self.open()?;
        if state.queues.remove(queue).is_none() {
            return Err(BrokerError::QueueNotFound(queue.clone()));
        }
        state.messages.retain(|(q, _), _| q != queue);
        state.retained.retain(|(q, _), _| q != queue);
        state.schedules.retain(|(q, _), _| q != queue);
        self.changed.notify_waiters();
        Ok(())
    }

    async fn pause(&self, queue: &QueueName, until: Option<u64>) -> BrokerResult<QueueInfo> {
        let (mut state, now) = self.open()?;
        let q = state
            .queues
            .get_mut(queue)
            .ok_or_else(|| BrokerError::QueueNotFound(queue.clone()))?;
        q.pause = Some(until);
        // Waiters must recompute their wake-up time (a timed pause ends).
        self.changed.notify_waiters();
        state.info(queue, now)
    }

    async fn resume(&self, queue: &QueueName) -> BrokerResult<QueueInfo> {
        let (mut state, now) = self.open()?;
        let q = state
            .queues
            .get_mut(queue)
            .ok_or_else(|| BrokerError::QueueNotFound(queue.clone()))?;
        q.pause = None;
        self.changed.notify_waiters();
        state.info(queue, now)
    }

    async fn enqueue(
        &self,
        queue: &QueueName,
        messages: Vec<EnqueueRequest>,
        options: EnqueueOptions,
    ) -> BrokerResult<Vec<BrokerResult<EnqueueOutcome>>> {
        let (mut state, now) = self.open()?;
        if !state.queues.contains_key(queue) {
            if !options.auto_create {
                return Err(BrokerError::QueueNotFound(queue.clone()));
            }
            state.create_queue(queue, QueueConfig::default());
        }
        let results = messages
            .into_iter()
            .map(|m| state.enqueue(queue, m, now))
            .collect();
        self.changed.notify_waiters();
        Ok(results)
    }

    async fn get(&self, queue: &QueueName, id: &MessageId) -> BrokerResult<Message> {
        let (state, _) = self.open()?;
        state.shown(queue, id)
    }

    async fn events(&self, queue: &QueueName, id: &MessageId) -> BrokerResult<History> {
        let (state, _) = self.open()?;
        state.history(queue, id)
    }

    async fn get_by_seq(&self, seq: u64) -> BrokerResult<Option<Message>> {
        let (state, _) = self.open()?;
        let found = state.messages.values().find(|s| s.msg.seq == seq);
        Ok(found.map(|s| s.msg.clone()))
    }

    async fn cancel(&self, queue: &QueueName, id: &MessageId) -> BrokerResult<()> {
        let (mut state, now) = self.open()?;
        let key = (queue.clone(), id.clone());
        match state.end(&key, MessageState::Cancelled, now) {
            Some(()) => {
                self.changed.notify_waiters();
                Ok(())
            }
            None => Err(state::not_found(queue, id)),
        }
    }

    async fn reschedule(
        &self,
        queue: &QueueName,
        id: &MessageId,
        change: Reschedule,
    ) -> BrokerResult<Message> {
        let (mut state, now) = self.open()?;
        let stored = state.stored_mut(queue, id)?;
        let m = &mut stored.msg;
        if matches!(m.state, MessageState::Leased | MessageState::Dead) {
            return Err(BrokerError::InvalidState {
                id: id.clone(),
                state: m.state,
                reason: "only scheduled and ready messages can be rescheduled",
            });
        }
        if let Some(schedule) = change.schedule {
            m.deliver_at = crate::check_deliver_at(schedule.deliver_at(now))?;
        }
        if let Some(priority) = change.priority {
            m.priority = priority;
        }
        m.state = state::waiting_state(m.deliver_at, now);
        let out = m.clone();
        stored.record(now, EventKind::Rescheduled);
        self.changed.notify_waiters();
        Ok(out)
    }

    async fn list(&self, queue: &QueueName, query: ListQuery) -> BrokerResult<Vec<Message>> {
        let (state, _) = self.open()?;
        state.config(queue)?;
        let mut all: Vec<&Message> = state
            .in_queue(queue)
            .map(|s| &s.msg)
            .filter(|m| m.state == query.state)
            .collect();
        all.sort_by_key(|m| state::list_key(m));
        // An `after` that is not (or no longer) in this list starts over.
        let start = query
            .after
            .and_then(|after| all.iter().position(|m| m.id == after))
            .map_or(0, |i| i + 1);
        let page = all.into_iter().skip(start).take(query.limit as usize);
        Ok(page.cloned().collect())
    }

    async fn lease_via(
        &self,
        queues: &[QueueName],
        request: LeaseRequest,
        via: Via,
    ) -> BrokerResult<Vec<Delivery>> {
        let watched = {
            let state = self.lock();
            state.check_open()?;
            state.incarnations(queues)
        };
        request.validate()?;
        let deadline = Instant::now() + Duration::from_millis(request.wait_ms);
        loop {
            // Registered before looking, so a change between the look and
            // the sleep still wakes us.
            let notified = self.changed.notified();
            let next = match self.try_lease(queues, &request, via, &watched)? {
                Ok(found) => return Ok(found),
                Err(next) => next,
            };
            if Instant::now() >= deadline {
                return Ok(Vec::new());
            }
            let wake = next.map_or(deadline, |at| {
                let in_ms = at.saturating_sub(self.clock.now_ms());
                deadline.min(Instant::now() + Duration::from_millis(in_ms))
            });
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    async fn lease_message(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease_ms: Option<u64>,
    ) -> BrokerResult<Delivery> {
        crate::check_lease_ms(lease_ms)?;
        let (mut state, now) = self.open()?;
        // An unknown queue holds no messages: the message is not found.
        let queue_lease = state
            .config(queue)
            .map_err(|_| state::not_found(queue, id))?
            .lease_ms;
        let stored = state.stored_mut(queue, id)?;
        if stored.msg.state == MessageState::Leased {
            return Err(BrokerError::InvalidState {
                id: id.clone(),
                state: MessageState::Leased,
                reason: "the message is already leased",
            });
        }
        let lease_ms = lease_ms.or(stored.msg.lease_ms).unwrap_or(queue_lease);
        Ok(state::deliver(stored, now, lease_ms, Via::Beanstalk))
    }

    async fn ack(&self, queue: &QueueName, id: &MessageId, lease: &LeaseId) -> BrokerResult<()> {
        let (mut state, now) = self.open()?;
        state.leased_mut(queue, id, lease)?;
        state.ack(&(queue.clone(), id.clone()), now);
        // A freed flow slot (or an ordered key's holder gone) may let a
        // held message out.
        self.changed.notify_waiters();
        Ok(())
    }

    async fn nack(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        nack: Nack,
    ) -> BrokerResult<()> {
        nack.validate()?;
        let (mut state, now) = self.open()?;
        let config = state
            .config(queue)
            .map_err(|_| state::not_found(queue, id))?;
        if nack.defer {
            if config.flow.is_none() {
                return Err(super::flow::no_flow(queue));
            }
            let stored = state.leased_mut(queue, id, lease)?;
            if let Some(priority) = nack.priority {
                stored.msg.priority = priority;
            }
            if let Some(error) = nack.error_text() {
                stored.msg.last_error = Some(error.to_owned());
            }
            let reason = nack.defer_reason();
            state.defer(&(queue.clone(), id.clone()), nack.delay_ms, reason, now)?;
            self.changed.notify_waiters();
            return Ok(());
        }
        let stored = state.leased_mut(queue, id, lease)?;
        stored.msg.counters.releases += 1;
        if let Some(priority) = nack.priority {
            stored.msg.priority = priority;
        }
        if let Some(error) = nack.error_text() {
            stored.msg.last_error = Some(error.to_owned());
        }
        stored.record(now, nack.event());
        state::fail_attempt(stored, &config, now, nack.delay_ms, nack.may_die);
        if stored.msg.state == MessageState::Scheduled && stored.msg.deliver_at <= now {
            stored.msg.state = MessageState::Ready;
        }
        self.changed.notify_waiters();
        Ok(())
    }

    async fn bury(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        priority: Option<u32>,
    ) -> BrokerResult<()> {
        let (mut state, now) = self.open()?;
        let stored = state.leased_mut(queue, id, lease)?;
        stored.lease = None;
        if let Some(priority) = priority {
            stored.msg.priority = priority;
        }
        state::kill(&mut stored.msg, now);
        let reason = DeathReason::Buried;
        stored.record(now, EventKind::Dead { reason });
        state::take_successor(stored, now);
        self.changed.notify_waiters();
        Ok(())
    }

    async fn extend(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        lease_ms: Option<u64>,
    ) -> BrokerResult<u64> {
        let (mut state, now) = self.open()?;
        crate::check_lease_ms(lease_ms)?;
        let queue_lease = state
            .config(queue)
            .map_err(|_| state::not_found(queue, id))?
            .lease_ms;
        let stored = state.leased_mut(queue, id, lease)?;
        let ms = lease_ms.or(stored.msg.lease_ms).unwrap_or(queue_lease);
        let until = now.saturating_add(ms);
        stored.msg.lease_until = Some(until);
        Ok(until)
    }

    async fn redrive(&self, queue: &QueueName, which: Redrive) -> BrokerResult<u64> {
        let (mut state, now) = self.open()?;
        state.config(queue)?;
        let mut dead: Vec<(u64, u64, MessageId)> = state
            .in_queue(queue)
            .filter(|s| s.msg.state == MessageState::Dead)
            .map(|s| (s.msg.died_at.unwrap_or(0), s.msg.seq, s.msg.id.clone()))
            .collect();
        dead.sort();
        let chosen: Vec<MessageId> = match which {
            Redrive::All => dead.into_iter().map(|d| d.2).collect(),
            Redrive::Ids(ids) => dead
                .into_iter()
                .map(|d| d.2)
                .filter(|id| ids.contains(id))
                .collect(),
            Redrive::Oldest(n) => dead.into_iter().take(n as usize).map(|d| d.2).collect(),
        };
        for id in &chosen {
            let stored = state.stored_mut(queue, id)?;
            let m = &mut stored.msg;
            m.state = MessageState::Ready;
            m.attempts = 0;
            m.deferrals = 0;
            m.died_at = None;
            m.deliver_at = m.deliver_at.min(now);
            m.counters.kicks += 1;
            stored.record(now, EventKind::Redriven);
        }
        self.changed.notify_waiters();
        Ok(chosen.len() as u64)
    }

    async fn put_schedule(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
        definition: ScheduleDefinition,
        options: EnqueueOptions,
    ) -> BrokerResult<(Upsert, ScheduleRecord)> {
        let (mut state, now) = self.open()?;
        let key = (queue.clone(), id.clone());
        let (upsert, record) = match state.schedules.get(&key).map(|r| r.settled(now)) {
            Some(current) => match current.replace(definition, now)? {
                Some(replaced) => {
                    state.cancel_written_ahead(&current, now);
                    (Upsert::Updated, replaced)
                }
                None => return Ok((Upsert::Updated, current)),
            },
            None => {
                // Validated before the queue is made: a failed call changes
                // nothing.
                let created = ScheduleRecord::create(queue.clone(), id.clone(), definition, now)?;
                if !state.queues.contains_key(queue) {
                    if !options.auto_create {
                        return Err(BrokerError::QueueNotFound(queue.clone()));
                    }
                    state.create_queue(queue, QueueConfig::default());
                }
                (Upsert::Created, created)
            }
        };
        state.schedules.insert(key, record.clone());
        // Waiting leases must take the new cursor into their wake-up time.
        self.changed.notify_waiters();
        Ok((upsert, record))
    }

    async fn get_schedule(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
    ) -> BrokerResult<ScheduleRecord> {
        let (state, now) = self.open()?;
        Ok(state.schedule(queue, id)?.settled(now))
    }

    async fn list_schedules(&self, queue: &QueueName) -> BrokerResult<Vec<ScheduleRecord>> {
        let (state, now) = self.open()?;
        state.config(queue)?;
        let records = state.schedules.iter().filter(|((q, _), _)| q == queue);
        Ok(records.map(|(_, record)| record.settled(now)).collect())
    }

    async fn delete_schedule(&self, queue: &QueueName, id: &ScheduleId) -> BrokerResult<()> {
        let (mut state, now) = self.open()?;
        let current = state.schedule(queue, id)?.settled(now);
        state.cancel_written_ahead(&current, now);
        state.schedules.remove(&(queue.clone(), id.clone()));
        self.changed.notify_waiters();
        Ok(())
    }

    async fn set_schedule_paused(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
        paused: bool,
    ) -> BrokerResult<ScheduleRecord> {
        let (mut state, now) = self.open()?;
        let current = state.schedule(queue, id)?.settled(now);
        let changed = if paused {
            current.pause(now)
        } else {
            current.resume(now)
        };
        let Some(record) = changed else {
            return Ok(current);
        };
        state.cancel_written_ahead(&current, now);
        state
            .schedules
            .insert((queue.clone(), id.clone()), record.clone());
        self.changed.notify_waiters();
        Ok(record)
    }

    async fn trigger_schedule(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
    ) -> BrokerResult<EnqueueOutcome> {
        let (mut state, now) = self.open()?;
        let request = state.schedule(queue, id)?.trigger_request(now);
        let outcome = state.enqueue(queue, request, now)?;
        self.changed.notify_waiters();
        Ok(outcome)
    }

    async fn key_info(&self, queue: &QueueName, key: &FlowKey) -> BrokerResult<KeyInfo> {
        let (state, now) = self.open()?;
        state.key_info(queue, key, now)
    }

    async fn ready(&self) -> BrokerResult<()> {
        self.lock().check_open()
    }

    async fn shutdown(&self) -> BrokerResult<()> {
        self.lock().shut_down = true;
        self.changed.notify_waiters();
        Ok(())
    }
}
