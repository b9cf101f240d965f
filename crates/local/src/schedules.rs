//! Recurring schedules under the state lock: the calls (put, get, list,
//! delete, pause/resume, trigger), the in-memory index of armed schedules,
//! and their loading at open. Firing is in `fire`.
//!
//! A schedule's record lives only in the store (`schedules` keyspace,
//! `schedule_codec`); reads look in the open group and the group in flight
//! first, as message reads do. What memory keeps per schedule is what its
//! timer needs: an [`ArmedSchedule`] in its queue's index and one timer
//! entry at its cursor. Paused and finished schedules (no cursor) have
//! neither, so memory grows with the schedules that can still fire, by a
//! few hundred bytes each, however large their message templates are.

use delayd_core::{
    BrokerError, BrokerResult, EnqueueOptions, EnqueueOutcome, QueueConfig, QueueName,
    ScheduleDefinition, ScheduleId, ScheduleRecord, Upsert,
};

use crate::error::StoreError;
use crate::messages::store_err;
use crate::schedule_codec::{self, ScheduleHead};
use crate::state::{QueueState, State, TimerTarget, Tx};
use crate::store::{Space, Store};

/// An armed schedule: its timer key and the (revision, cursor) the timer
/// was armed for. A fire compares them with the stored record, so a timer
/// that outlived a change of the schedule can never fire a stale cursor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ArmedSchedule {
    pub timer: u64,
    pub revision: u64,
    pub cursor: u64,
}

impl State {
    /// The stored record of a schedule: the open group's write, else the
    /// group in flight's, else the engine's.
    pub fn stored_schedule(
        &self,
        store: &Store,
        queue: &QueueName,
        id: &ScheduleId,
    ) -> Result<Option<ScheduleRecord>, StoreError> {
        let key = schedule_codec::schedule_key(queue, id);
        let value = match self.overlay(Space::Schedules, &key) {
            Some(Some(value)) => Some(value.to_vec()),
            Some(None) => None,
            None => store.schedule(&key)?,
        };
        value
            .map(|value| schedule_codec::decode_schedule(&key, &value))
            .transpose()
    }

    /// A schedule of an existing queue: `QueueNotFound`, then
    /// `ScheduleNotFound`.
    pub fn existing_schedule(
        &self,
        store: &Store,
        queue: &QueueName,
        id: &ScheduleId,
    ) -> BrokerResult<ScheduleRecord> {
        self.queue(queue)?;
        self.stored_schedule(store, queue, id)
            .map_err(store_err)?
            .ok_or_else(|| BrokerError::ScheduleNotFound {
                queue: queue.clone(),
                id: id.clone(),
            })
    }

    /// Stores `record` and arms its timer for its cursor (or disarms it).
    pub fn write_schedule(
        &mut self,
        record: &ScheduleRecord,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<()> {
        let key = schedule_codec::schedule_key(&record.queue, &record.id);
        let (value, head) = schedule_codec::encode_schedule(record).map_err(store_err)?;
        tx.ws.put(Space::Schedules, key, value);
        self.arm_schedule(&record.queue, &record.id, head, now, tx);
        Ok(())
    }

    /// Deletes the message `current` (settled at `now`) wrote ahead for a
    /// later fire time, which a change at `now` cancels, unless a worker
    /// holds it (a client moved it forward and leased it).
    fn cancel_written_ahead(
        &mut self,
        store: &Store,
        current: &ScheduleRecord,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<()> {
        let queue = &current.queue;
        let cancelled = current.cancelled_by_change(now, |id| {
            self.lookup(store, queue, id).map(|m| m.map(|m| m.state))
        })?;
        match cancelled {
            Some(id) => self.drop_message(store, queue, &id, tx).map(drop),
            None => Ok(()),
        }
    }

    /// Puts the schedule's timer at its wake time, reusing its timer key;
    /// without a cursor, drops it from memory.
    pub fn arm_schedule(
        &mut self,
        queue: &QueueName,
        id: &ScheduleId,
        head: ScheduleHead,
        now: u64,
        tx: &mut Tx,
    ) {
        let (Some(cursor), Some(wake)) = (head.next_fire_at, head.wake_at) else {
            self.disarm_schedule(queue, id);
            return;
        };
        let armed = self.armed(queue, id);
        let timer = armed.map_or_else(|| self.new_schedule_timer_key(), |a| a.timer);
        let Some(q) = self.queues.get_mut(queue) else {
            return;
        };
        let entry = ArmedSchedule {
            timer,
            revision: head.revision,
            cursor,
        };
        q.schedules.insert(id.clone(), entry);
        self.timer_at(queue, id, timer, wake, now, tx);
    }

    /// (Re-)arms the timer `timer` of a schedule at wall time `at`.
    pub fn timer_at(
        &mut self,
        queue: &QueueName,
        id: &ScheduleId,
        timer: u64,
        at: u64,
        now: u64,
        tx: &mut Tx,
    ) {
        let target = TimerTarget::Schedule(queue.clone(), id.clone());
        if self.timers.insert(timer, at, target, now) {
            tx.wake_driver = true;
        }
    }

    pub fn armed(&self, queue: &QueueName, id: &ScheduleId) -> Option<ArmedSchedule> {
        self.queues.get(queue)?.schedules.get(id).copied()
    }

    pub fn disarm_schedule(&mut self, queue: &QueueName, id: &ScheduleId) {
        let armed = self
            .queues
            .get_mut(queue)
            .and_then(|q| q.schedules.remove(id));
        if let Some(armed) = armed {
            self.timers.cancel(armed.timer);
        }
    }

    /// `Broker::put_schedule` under the lock.
    #[expect(
        clippy::too_many_arguments,
        reason = "the trait method's arguments plus the lock's context"
    )]
    pub fn put_schedule(
        &mut self,
        store: &Store,
        queue: &QueueName,
        id: &ScheduleId,
        definition: ScheduleDefinition,
        options: EnqueueOptions,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<(Upsert, ScheduleRecord)> {
        // Checks and reads before the queue is created: a failed call
        // changes nothing.
        definition.validate()?;
        if !self.queues.contains_key(queue) && !options.auto_create {
            return Err(BrokerError::QueueNotFound(queue.clone()));
        }
        let current = self.stored_schedule(store, queue, id).map_err(store_err)?;
        let current = current.map(|record| record.settled(now));
        let replaced = match &current {
            Some(current) => match current.replace(definition.clone(), now)? {
                None => return Ok((Upsert::Updated, current.clone())),
                Some(record) => Some(record),
            },
            None => None,
        };
        if !self.queues.contains_key(queue) {
            self.create_queue(queue, QueueConfig::default(), tx);
        }
        let (upsert, record) = match (current, replaced) {
            (Some(current), Some(record)) => {
                self.cancel_written_ahead(store, &current, now, tx)?;
                (Upsert::Updated, record)
            }
            _ => {
                let record = ScheduleRecord::create(queue.clone(), id.clone(), definition, now)?;
                (Upsert::Created, record)
            }
        };
        self.write_schedule(&record, now, tx)?;
        Ok((upsert, record))
    }

    pub fn delete_schedule(
        &mut self,
        store: &Store,
        queue: &QueueName,
        id: &ScheduleId,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<()> {
        let current = self.existing_schedule(store, queue, id)?.settled(now);
        self.cancel_written_ahead(store, &current, now, tx)?;
        tx.ws
            .delete(Space::Schedules, schedule_codec::schedule_key(queue, id));
        self.disarm_schedule(queue, id);
        Ok(())
    }

    pub fn set_schedule_paused(
        &mut self,
        store: &Store,
        queue: &QueueName,
        id: &ScheduleId,
        paused: bool,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<ScheduleRecord> {
        let current = self.existing_schedule(store, queue, id)?.settled(now);
        let changed = match paused {
            true => current.pause(now),
            false => current.resume(now),
        };
        let Some(record) = changed else {
            return Ok(current);
        };
        self.cancel_written_ahead(store, &current, now, tx)?;
        self.write_schedule(&record, now, tx)?;
        Ok(record)
    }

    pub fn trigger_schedule(
        &mut self,
        store: &Store,
        queue: &QueueName,
        id: &ScheduleId,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<EnqueueOutcome> {
        let record = self.existing_schedule(store, queue, id)?;
        self.enqueue_one(store, queue, record.trigger_request(now), now, tx)
    }

    /// The queue's schedules by id. The caller flushed the open group
    /// (this scans the engine).
    pub fn list_schedules(
        &self,
        store: &Store,
        queue: &QueueName,
    ) -> BrokerResult<Vec<ScheduleRecord>> {
        self.queue(queue)?;
        let stored = store.queue_schedules(queue).map_err(store_err)?;
        stored
            .iter()
            .map(|(key, value)| schedule_codec::decode_schedule(key, value).map_err(store_err))
            .collect()
    }

    /// Deletes every schedule of a queue that is being deleted. The caller
    /// flushed the open group (this scans the engine).
    pub fn delete_queue_schedules(
        &mut self,
        store: &Store,
        queue: &QueueName,
        tx: &mut Tx,
    ) -> BrokerResult<()> {
        for (key, _) in store.queue_schedules(queue).map_err(store_err)? {
            tx.ws.delete(Space::Schedules, key);
        }
        let armed = self
            .queues
            .get_mut(queue)
            .map(QueueState::take_schedules)
            .unwrap_or_default();
        for armed in armed.values() {
            self.timers.cancel(armed.timer);
        }
        Ok(())
    }

    /// Arms every stored schedule that has a cursor (open): due ones fire
    /// in the driver's first round (catch-up). Reads only each record's
    /// head.
    pub fn load_schedules(&mut self, store: &Store, now: u64) -> Result<u64, StoreError> {
        let mut tx = Tx::default();
        let mut armed = 0;
        for (key, head) in store.schedule_heads()? {
            let (queue, id) = schedule_codec::decode_schedule_key(&key)?;
            if !self.queues.contains_key(&queue) {
                // Deleted with its queue in the same batch; never apart.
                return Err(StoreError::Corrupt(format!(
                    "schedule {id} of queue {queue}, which does not exist"
                )));
            }
            if head.wake_at.is_some() {
                self.arm_schedule(&queue, &id, head, now, &mut tx);
                armed += 1;
            }
        }
        Ok(armed)
    }
}
