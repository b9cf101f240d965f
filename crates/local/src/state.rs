//! The broker's in-memory state and the transitions every call is built
//! from: look a message up (memory, else disk), unlink it from memory,
//! change it, place it again.
//!
//! What is in memory: every queue; every message that is ready, leased or
//! dead; scheduled messages whose (deliver_at, seq) is below the
//! horizon watermark. Scheduled messages at or beyond the watermark live
//! only on disk, in the `due` index, until the loader reaches them.
//!
//! All methods run under the broker's state lock and record their writes
//! in a [`Tx`]; the caller commits the write set before releasing the lock.

use std::collections::{BTreeMap, BTreeSet};

use delayd_core::{
    BrokerError, BrokerResult, FlowKey, MessageId, MessageState, QueueConfig, QueueInfo, QueueName,
    ScheduleId, DEFAULT_PRIORITY,
};

use crate::bounded_map::BoundedMap;
use crate::codec::{self, MessageRecord, QueueRecord};
use crate::driver::Horizon;
use crate::error::StoreError;
use crate::flow::{FlowMem, Flows};
use crate::group::{Closed, Groups};
use crate::schedules::ArmedSchedule;
use crate::store::{Space, Store, WriteSet};
use crate::timers::Timers;
use crate::waiters::Waiters;

/// Ready messages of a queue in delivery order: (priority, deliver_at, seq).
pub(crate) type ReadyKey = (u32, u64, u64);

/// A queue's in-memory messages by id. Records are boxed, so that the
/// table moves 24-byte entries when it resizes (incrementally, see
/// `bounded_map`) and its empty buckets cost 24 bytes, not a record.
#[derive(Default)]
pub(crate) struct Messages(BoundedMap<MessageId, Box<MessageRecord>>);

impl Messages {
    pub fn get(&self, id: &MessageId) -> Option<&MessageRecord> {
        self.0.get(id).map(|rec| &**rec)
    }

    pub fn get_mut(&mut self, id: &MessageId) -> Option<&mut MessageRecord> {
        self.0.get_mut(id).map(|rec| &mut **rec)
    }

    pub fn contains_key(&self, id: &MessageId) -> bool {
        self.0.contains_key(id)
    }

    /// Stores `rec` under its id (replacing the record there).
    pub fn insert(&mut self, rec: MessageRecord) {
        self.0.insert(rec.id.clone(), Box::new(rec));
    }

    pub fn remove(&mut self, id: &MessageId) -> Option<MessageRecord> {
        self.0.remove(id).map(|rec| *rec)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn values(&self) -> impl Iterator<Item = &MessageRecord> {
        self.0.values().map(|rec| &**rec)
    }
}

/// A queue's ready messages that may be delivered (a flow key's parked
/// ones are not here), in delivery order, with the count of the urgent
/// ones (priority below the default) kept beside it so stats are O(1).
/// Every change goes through `insert` and `remove`, which keep the count.
#[derive(Default)]
pub(crate) struct ReadySet {
    by_order: BTreeMap<ReadyKey, MessageId>,
    urgent: u64,
}

impl ReadySet {
    pub fn insert(&mut self, key: ReadyKey, id: MessageId) {
        let replaced = self.by_order.insert(key, id);
        debug_assert!(replaced.is_none(), "ready key {key:?} inserted twice");
        if replaced.is_none() && key.0 < DEFAULT_PRIORITY {
            self.urgent += 1;
        }
    }

    pub fn remove(&mut self, key: &ReadyKey) -> Option<MessageId> {
        let id = self.by_order.remove(key)?;
        if key.0 < DEFAULT_PRIORITY {
            self.urgent -= 1;
        }
        Some(id)
    }

    /// The next message in delivery order.
    pub fn first(&self) -> Option<(&ReadyKey, &MessageId)> {
        self.by_order.first_key_value()
    }

    pub fn len(&self) -> usize {
        self.by_order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_order.is_empty()
    }

    /// Messages with a priority below the default.
    pub fn urgent(&self) -> u64 {
        self.urgent
    }
}

pub(crate) struct QueueState {
    /// Its config, pause and counts: written by `place`/`remove` (counts)
    /// and the setters below, and once per group to the store.
    record: QueueRecord,
    pub messages: Messages,
    pub ready: ReadySet,
    /// The queue's schedules that have a cursor (not paused, not
    /// finished), with their timer; the records themselves are on disk
    /// only (`schedules` keyspace), read when one fires.
    pub schedules: BoundedMap<ScheduleId, ArmedSchedule>,
    /// Flow control's memory (module `flow`); empty without `flow`.
    pub flow: FlowMem,
    /// The successors of its leased messages (module `replace`).
    pub successors: crate::replace::Successors,
}

impl QueueState {
    /// Whether every stored message of the queue is in memory (the counts
    /// are of stored messages; memory holds a subset of them), so that a
    /// message not in memory does not exist.
    pub fn all_in_memory(&self) -> bool {
        let counts = &self.record.counts;
        let stored = counts.waiting + counts.leased + counts.dead;
        self.messages.len() as u64 == stored
    }

    pub fn new(record: QueueRecord) -> Self {
        Self {
            record,
            messages: Messages::default(),
            ready: ReadySet::default(),
            schedules: BoundedMap::default(),
            flow: FlowMem::default(),
            successors: Default::default(),
        }
    }

    pub fn config(&self) -> &QueueConfig {
        &self.record.config
    }

    /// The queue's flow config beside its flow memory, for flow control
    /// to change the one by the other.
    pub fn flow_parts(&mut self) -> (Option<&delayd_core::FlowConfig>, &mut FlowMem) {
        (self.record.config.flow.as_ref(), &mut self.flow)
    }

    /// The queue's armed schedules, taken out (its schedules are deleted).
    pub fn take_schedules(&mut self) -> BoundedMap<ScheduleId, ArmedSchedule> {
        std::mem::take(&mut self.schedules)
    }

    /// Flow memory rebuilt for a changed `flow` (module `flow`).
    pub fn replace_flow(&mut self, fresh: FlowMem) -> FlowMem {
        std::mem::replace(&mut self.flow, fresh)
    }

    /// A message of the queue is retained until `until`.
    pub fn note_retained(&mut self, until: u64) {
        self.record.retained_until = self.record.retained_until.max(until);
    }

    /// Whether a retained message may still be kept at `now`.
    pub fn may_retain(&self, now: u64) -> bool {
        self.record.retained_until > now
    }

    pub fn set_config(&mut self, config: QueueConfig) {
        self.record.config = config;
    }

    /// Paused until `until` (`u64::MAX`: until resumed); `None` resumes.
    pub fn set_paused_until(&mut self, until: Option<u64>) {
        self.record.paused_until = until;
    }

    pub fn paused(&self, now: u64) -> bool {
        self.record.paused_until.is_some_and(|until| now < until)
    }

    pub fn info(&self, name: &QueueName, now: u64) -> QueueInfo {
        let paused = self.paused(now);
        let (flow_keys, cooling_keys) = crate::flow::key_counts(self, now);
        QueueInfo {
            name: name.clone(),
            config: self.record.config.clone(),
            paused,
            paused_until: self
                .record
                .paused_until
                .filter(|&until| paused && until != u64::MAX),
            stats: delayd_core::QueueStats {
                flow_keys,
                cooling_keys,
                ..self.record.stats(self.ready_len(), self.ready.urgent())
            },
        }
    }

    /// Ready messages, parked ones (held back by their key) included.
    pub fn ready_len(&self) -> u64 {
        (self.ready.len() + self.flow.parked_len()) as u64
    }
}

/// The writes and wake-ups of one call.
#[derive(Default)]
pub(crate) struct Tx {
    pub ws: WriteSet,
    dirty: BTreeSet<QueueName>,
    /// Queues in which messages became ready: their waiting lease calls
    /// are served before the call's writes join the commit group.
    pub ready_queues: Vec<QueueName>,
    /// A timer earlier than the driver's next deadline was armed.
    pub wake_driver: bool,
    /// A message this call leased was last written by a group that is not
    /// durable yet: the lease waits for the group's fsync (a lease alone
    /// does not, see `lease.rs`).
    pub reads_undurable: bool,
}

impl Tx {
    /// Messages became ready in `queue`, on which some lease call waits.
    pub fn note_ready(&mut self, queue: &QueueName) {
        if !self.ready_queues.contains(queue) {
            self.ready_queues.push(queue.clone());
        }
    }
}

/// What a timer is for.
pub(crate) enum TimerTarget {
    /// A scheduled message (due) or a leased one (lease runs out); the
    /// timer is keyed by its seq.
    Message(QueueName, MessageId),
    /// A schedule's cursor; keyed by [`ArmedSchedule::timer`], from
    /// [`SCHEDULE_TIMERS`] up, so that it never meets a seq.
    Schedule(QueueName, ScheduleId),
    /// A flow key's hold ends (or its state may be forgotten); keyed from
    /// [`crate::flow::FLOW_TIMERS`] up.
    FlowKey(QueueName, FlowKey),
    /// A queue's own flow gate opens (rate, cooldown).
    FlowQueue(QueueName),
}

/// First timer key of schedules: seqs stay far below 2^63.
pub(crate) const SCHEDULE_TIMERS: u64 = 1 << 63;

pub(crate) struct State {
    pub queues: BTreeMap<QueueName, QueueState>,
    /// Timer per in-memory scheduled or leased message (keyed by seq) and
    /// per armed schedule (keyed from [`SCHEDULE_TIMERS`]).
    pub timers: Timers<TimerTarget>,
    /// The next schedule timer key to hand out.
    next_schedule_timer: u64,
    /// Which scheduled messages are in memory (module `driver`).
    pub horizon: Horizon,
    next_seq: u64,
    /// The open commit group and the group in flight (module `group`).
    pub groups: Groups,
    pub waiters: Waiters,
    /// Flow control's broker-wide memory (module `flow`).
    pub flows: Flows,
    /// Whether messages keep a history (`LocalConfig::history`); fixed
    /// at open.
    history: bool,
}

fn store_err(e: StoreError) -> BrokerError {
    BrokerError::Unavailable {
        reason: e.to_string(),
        maybe_applied: false,
    }
}

impl State {
    pub fn new(next_seq: u64, history: bool) -> Self {
        Self {
            history,
            queues: BTreeMap::new(),
            timers: Timers::default(),
            next_schedule_timer: SCHEDULE_TIMERS,
            horizon: Horizon::default(),
            next_seq,
            groups: Groups::default(),
            waiters: Waiters::default(),
            flows: Flows::default(),
        }
    }

    /// Whether messages keep a history (`LocalConfig::history`).
    pub fn keeps_history(&self) -> bool {
        self.history
    }

    /// The next seq to hand out: every seq below it was handed out.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// A key for a schedule's timer, from [`SCHEDULE_TIMERS`] up (never a
    /// seq, never reused).
    pub fn new_schedule_timer_key(&mut self) -> u64 {
        let timer = self.next_schedule_timer;
        self.next_schedule_timer += 1;
        timer
    }

    /// A queue read from the store at open, its flow buckets empty at the
    /// broker's open.
    pub fn restore_queue(&mut self, name: QueueName, record: QueueRecord) {
        let flow = FlowMem::new(record.config.flow.as_ref(), self.flows.opened_at());
        let mut queue = QueueState::new(record);
        queue.flow = flow;
        self.queues.insert(name, queue);
    }

    /// Forgets a deleted queue (its messages were removed before): its
    /// record is deleted with the open group, and the lease calls waiting
    /// on it return empty.
    pub fn drop_queue(&mut self, name: &QueueName, tx: &mut Tx) -> BrokerResult<()> {
        self.queue_mut(name, tx)?;
        self.queues.remove(name);
        self.waiters.drop_queue(name);
        Ok(())
    }

    pub fn queue(&self, name: &QueueName) -> BrokerResult<&QueueState> {
        self.queues
            .get(name)
            .ok_or_else(|| BrokerError::QueueNotFound(name.clone()))
    }

    pub fn queue_mut(&mut self, name: &QueueName, tx: &mut Tx) -> BrokerResult<&mut QueueState> {
        tx.dirty.insert(name.clone());
        self.queues
            .get_mut(name)
            .ok_or_else(|| BrokerError::QueueNotFound(name.clone()))
    }

    pub fn create_queue(&mut self, name: &QueueName, config: QueueConfig, tx: &mut Tx) {
        let flow = FlowMem::new(config.flow.as_ref(), self.flows.opened_at());
        let record = QueueRecord {
            config,
            paused_until: None,
            counts: Default::default(),
            retained_until: 0,
        };
        let mut queue = QueueState::new(record);
        queue.flow = flow;
        self.queues.insert(name.clone(), queue);
        tx.dirty.insert(name.clone());
    }

    /// Adds a call's writes to the open commit group; returns the ticket
    /// the call waits on ([`Groups::absorb`]).
    pub fn absorb(&mut self, tx: Tx) -> u64 {
        self.groups.absorb(tx.ws, tx.dirty)
    }

    /// Whether the stored record of a message has a write that is not
    /// durable yet ([`Groups::write_pending`]).
    pub fn write_pending(&self, queue: &QueueName, id: &MessageId) -> bool {
        self.groups.write_pending(queue, id)
    }

    /// Closes the open group for the sync thread ([`Groups::close`]), with
    /// the records of the queues its calls changed.
    pub fn close_group(&mut self) -> Result<Closed, StoreError> {
        let queues = &self.queues;
        self.groups
            .close(|name| queues.get(name).map(|q| &q.record))
    }

    /// Writes the open group's writes to the engine now (before a scan of
    /// an index, which must see them); the group stays open
    /// ([`Groups::flush`]).
    pub fn flush_pending(&mut self, store: &Store) -> Result<(), StoreError> {
        let queues = &self.queues;
        self.groups
            .flush(store, |name| queues.get(name).map(|q| &q.record))
    }

    /// A stored value as the open group, else the group in flight, else
    /// the engine has it (`None` here: ask the engine).
    pub fn overlay(&self, space: Space, key: &[u8]) -> Option<Option<&[u8]>> {
        self.groups.overlay(space, key)
    }

    /// A message record as stored: the open group's write, else the
    /// engine's.
    pub fn stored_message(
        &self,
        store: &Store,
        key: &[u8],
    ) -> Result<Option<MessageRecord>, StoreError> {
        match self.overlay(Space::Messages, key) {
            Some(Some(value)) => codec::decode_record(value).map(Some),
            Some(None) => Ok(None),
            None => store.message(key),
        }
    }

    /// A payload as stored (with its message key): the open group's
    /// write, else the engine's.
    pub fn stored_payload(
        &self,
        store: &Store,
        seq: u64,
    ) -> Result<Option<crate::store::KeyAndPayload>, StoreError> {
        match self.overlay(Space::Payloads, &codec::seq_key(seq)) {
            Some(Some(value)) => {
                let (key, payload) = codec::decode_payload(value)?;
                Ok(Some((key.to_vec(), payload.to_vec())))
            }
            Some(None) => Ok(None),
            None => store.payload(seq),
        }
    }

    /// A live message: from memory, else from disk.
    pub fn lookup(
        &self,
        store: &Store,
        queue: &QueueName,
        id: &MessageId,
    ) -> BrokerResult<Option<MessageRecord>> {
        self.lookup_in(store, queue, id, None)
    }

    /// A live message as a call sees it: from memory, else from the call's
    /// own writes so far (`tx`: an earlier item of its batch or command of
    /// its pipeline, stored beyond the horizon), else from disk.
    pub fn lookup_in(
        &self,
        store: &Store,
        queue: &QueueName,
        id: &MessageId,
        tx: Option<&Tx>,
    ) -> BrokerResult<Option<MessageRecord>> {
        let Some(q) = self.queues.get(queue) else {
            return Ok(None);
        };
        if let Some(rec) = q.messages.get(id) {
            return Ok(Some(rec.clone()));
        }
        if q.all_in_memory() {
            // Not in memory and nothing of the queue only on disk: absent.
            // Spares the engine lookup every new id's enqueue made (a
            // memtable search: 10% of the server's CPU in a profile).
            return Ok(None);
        }
        let key = codec::message_key(queue, id);
        let own = tx.and_then(|tx| tx.ws.get(Space::Messages, &key));
        let found = match own {
            Some(Some(value)) => codec::decode_record(value).map(Some),
            Some(None) => Ok(None),
            None => self.stored_message(store, &key),
        };
        found.map_err(store_err)
    }

    /// A live message the call `tx` changes (see [`State::lookup_in`]), or
    /// `MessageNotFound`.
    pub fn lookup_existing(
        &self,
        store: &Store,
        queue: &QueueName,
        id: &MessageId,
        tx: &Tx,
    ) -> BrokerResult<MessageRecord> {
        self.lookup_in(store, queue, id, Some(tx))?
            .ok_or_else(|| BrokerError::MessageNotFound {
                queue: queue.clone(),
                id: id.clone(),
            })
    }

    /// Removes a message from the in-memory structures (not from disk).
    pub fn unlink(&mut self, queue: &QueueName, id: &MessageId) {
        let Some(q) = self.queues.get_mut(queue) else {
            return;
        };
        let Some(rec) = q.messages.remove(id) else {
            return;
        };
        let keyed = crate::flow::keyed(q, &rec).is_some();
        if rec.state == MessageState::Ready && !keyed {
            let removed = q.ready.remove(&(rec.priority, rec.deliver_at, rec.seq));
            debug_assert!(
                removed.is_some(),
                "ready message {id} missing from ready set"
            );
        }
        self.timers.cancel(rec.seq);
        self.flow_unindex(queue, &rec);
    }

    /// Records `new` (replacing `old`, both as they were before the call)
    /// and puts it where it belongs in memory. `unlink` must have run.
    pub fn place(
        &mut self,
        queue: &QueueName,
        old: Option<&MessageRecord>,
        mut new: MessageRecord,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<()> {
        if matches!(new.state, MessageState::Scheduled | MessageState::Ready) {
            new.state = if new.deliver_at <= now {
                MessageState::Ready
            } else {
                MessageState::Scheduled
            };
        }
        tx.ws.message(queue, old, Some(&new)).map_err(store_err)?;
        // A message that holds its flow key stays in memory (and pinned on
        // disk): an ordered key must know its next message.
        let in_memory = new.stored_state() != MessageState::Scheduled
            || self.horizon.holds(new.deliver_at, new.seq)
            || new.holds_key();
        let timer = match new.state {
            MessageState::Scheduled => Some(new.deliver_at),
            MessageState::Leased => new.lease_until,
            _ => None,
        };
        let waited_on = self.waiters.waiting_on(queue);
        let q = self.queue_mut(queue, tx)?;
        adjust_counts(&mut q.record, old, Some(&new));
        if !in_memory {
            return Ok(());
        }
        self.index(queue, new, timer, waited_on, now, tx);
        Ok(())
    }

    /// Puts a record that is in memory from now on into the ready set (or
    /// parks it by flow key), its timer and its flow counts.
    fn index(
        &mut self,
        queue: &QueueName,
        rec: MessageRecord,
        timer: Option<u64>,
        waited_on: bool,
        now: u64,
        tx: &mut Tx,
    ) {
        let Some(q) = self.queues.get_mut(queue) else {
            return;
        };
        let flow_key = crate::flow::keyed(q, &rec).cloned();
        if rec.state == MessageState::Ready {
            match &flow_key {
                Some(key) => {
                    let rk = (rec.priority, rec.deliver_at, rec.seq);
                    q.flow.park(key.clone(), rk, rec.id.clone());
                }
                None => {
                    insert_ready(q, &rec);
                    if waited_on {
                        tx.note_ready(queue);
                    }
                }
            }
        }
        self.flow_index(queue, &rec);
        let (seq, id) = (rec.seq, rec.id.clone());
        if let Some(q) = self.queues.get_mut(queue) {
            q.messages.insert(rec);
        }
        if let Some(deadline) = timer {
            self.arm(seq, deadline, (queue.clone(), id), now, tx);
        }
    }

    fn arm(
        &mut self,
        seq: u64,
        deadline: u64,
        target: (QueueName, MessageId),
        now: u64,
        tx: &mut Tx,
    ) {
        let (queue, id) = target;
        if self
            .timers
            .insert(seq, deadline, TimerTarget::Message(queue, id), now)
        {
            tx.wake_driver = true;
        }
    }

    /// Deletes a message with its history (an end without retention,
    /// queue deletion, a fire taken back). `unlink` must have run.
    pub fn remove(
        &mut self,
        queue: &QueueName,
        old: &MessageRecord,
        tx: &mut Tx,
    ) -> BrokerResult<()> {
        crate::history::forget(&mut tx.ws, old);
        self.remove_record(queue, old, tx)
    }

    /// Deletes a message but not its history (it is retained), and its
    /// successor with it. `unlink` must have run.
    pub fn remove_record(
        &mut self,
        queue: &QueueName,
        old: &MessageRecord,
        tx: &mut Tx,
    ) -> BrokerResult<()> {
        self.remove_successor(queue, &old.id, tx);
        tx.ws.message(queue, Some(old), None).map_err(store_err)?;
        if let Ok(q) = self.queue_mut(queue, tx) {
            adjust_counts(&mut q.record, Some(old), None);
        }
        Ok(())
    }

    /// Loads a message from disk into memory without writing (horizon
    /// loader, recovery). Skips messages already in memory.
    pub fn load(&mut self, queue: &QueueName, mut rec: MessageRecord, now: u64, tx: &mut Tx) {
        let waited_on = self.waiters.waiting_on(queue);
        let Some(q) = self.queues.get_mut(queue) else {
            return;
        };
        if q.messages.contains_key(&rec.id) {
            return;
        }
        if rec.state == MessageState::Scheduled && rec.deliver_at <= now {
            rec.state = MessageState::Ready;
        }
        let timer = match rec.state {
            MessageState::Scheduled => Some(rec.deliver_at),
            MessageState::Leased => rec.lease_until,
            _ => None,
        };
        // A deferred message is due when its key's cooldown ends: the
        // cooldown comes back with it after a restart.
        let cooling = (rec.deferrals > 0
            && rec.state == MessageState::Scheduled
            && q.record.config.flow.is_some())
        .then(|| (rec.key.clone(), rec.deliver_at));
        self.index(queue, rec, timer, waited_on, now, tx);
        if let Some((key, until)) = cooling {
            self.cool_down(queue, key.as_ref(), until);
        }
    }

    /// A scheduled message's timer fired: it becomes ready. Memory only,
    /// because on disk "scheduled and due" already means ready.
    pub fn make_ready(&mut self, queue: &QueueName, id: &MessageId, tx: &mut Tx) -> bool {
        let waited_on = self.waiters.waiting_on(queue);
        let Some(q) = self.queues.get_mut(queue) else {
            return false;
        };
        let Some(rec) = q.messages.get_mut(id) else {
            return false;
        };
        if rec.state != MessageState::Scheduled {
            return false;
        }
        rec.state = MessageState::Ready;
        let rec = rec.clone();
        match crate::flow::keyed(q, &rec).cloned() {
            Some(key) => self.park(queue, &key, &rec),
            None => {
                insert_ready(q, &rec);
                if waited_on {
                    tx.note_ready(queue);
                }
            }
        }
        true
    }

    /// The first ready message among `queues` (not paused), by
    /// (priority, deliver_at, seq).
    pub fn first_ready(&self, queues: &[QueueName], now: u64) -> Option<(QueueName, MessageId)> {
        let mut best: Option<(ReadyKey, &QueueName, &MessageId)> = None;
        for name in queues {
            let Some(q) = self.queues.get(name) else {
                continue;
            };
            if q.paused(now) {
                continue;
            }
            let flow = q.record.config.flow.as_ref();
            if flow.is_some_and(|flow| flow.admit_queue(q.flow.gate(), now).is_err()) {
                continue;
            }
            if let Some((key, id)) = q.ready.first() {
                if best.as_ref().is_none_or(|(b, _, _)| key < b) {
                    best = Some((*key, name, id));
                }
            }
        }
        best.map(|(_, q, id)| (q.clone(), id.clone()))
    }

    pub fn allocate_seq(&mut self, tx: &mut Tx) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        tx.ws
            .put(Space::Meta, codec::META_SEQ, seq.to_be_bytes().to_vec());
        seq
    }
}

fn insert_ready(q: &mut QueueState, rec: &MessageRecord) {
    q.ready
        .insert((rec.priority, rec.deliver_at, rec.seq), rec.id.clone());
}

fn adjust_counts(
    record: &mut QueueRecord,
    old: Option<&MessageRecord>,
    new: Option<&MessageRecord>,
) {
    let counts = &mut record.counts;
    if let Some(old) = old {
        let slot = match old.stored_state() {
            MessageState::Leased => &mut counts.leased,
            MessageState::Dead => &mut counts.dead,
            _ => &mut counts.waiting,
        };
        debug_assert!(*slot > 0, "count underflow removing {:?}", old.id);
        *slot = slot.saturating_sub(1);
    }
    if let Some(new) = new {
        match new.stored_state() {
            MessageState::Leased => counts.leased += 1,
            MessageState::Dead => counts.dead += 1,
            _ => counts.waiting += 1,
        }
    }
}
