//! LocalBroker's flow control: the memory the gate (`delayd_core::flow`)
//! works on, kept so that a held-back message costs nothing while it waits.
//!
//! A queue with `flow` keeps its keyed ready messages *parked* by (key,
//! delivery order). Of each key at most one message, its *head*, is in the
//! queue's ready set, and only while the key may deliver (a token, a free
//! slot, no cooldown, and with `ordered` the key's next message). So a
//! lease looks at the ready set exactly as without flow: a key with a
//! million ready messages is one entry there, and a held key is none.
//! Messages without a key go to the ready set directly. The queue's own
//! limits are checked in `State::first_ready`.
//!
//! Nothing polls. A key held until a time (rate, cooldown) has one timer
//! in the wheel; a key held by its slots is looked at again when one of its
//! leases ends (`unlink` of a leased message marks it). The counts of
//! leased messages (the slots) change only in `index`/`unindex`, which
//! `place`, `load` and `unlink` call, so every end of a lease frees its slot.
//!
//! A restart starts every bucket empty at the restart (`Bucket::empty`), so
//! no restart grants a burst beyond `burst`. Cooldowns come back from the
//! deferred messages themselves (a deferred message is due when its key's
//! cooldown ends), and an ordered key's holder is pinned in memory and on
//! disk (`pinned`), so it is its key's next message after a restart too.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use delayd_core::{
    flow, metric, Bucket, FlowConfig, FlowKey, GateState, Hold, KeyInfo, MessageId, QueueName,
};

use crate::codec::MessageRecord;
use crate::state::{QueueState, ReadyKey, State, TimerTarget, Tx};

/// First timer key of flow timers: below the schedules' ([`crate::state::SCHEDULE_TIMERS`]),
/// far above any seq.
pub(crate) const FLOW_TIMERS: u64 = 1 << 62;

/// A queue's flow memory (empty for a queue without `flow`).
#[derive(Default)]
pub(crate) struct FlowMem {
    /// The queue's bucket, leased count and cooldown.
    gate: GateState,
    keys: HashMap<FlowKey, KeyMem>,
    /// Ready messages of keys that are not their key's head in the ready
    /// set, by key then delivery order.
    parked: BTreeMap<(FlowKey, ReadyKey), MessageId>,
    /// Each key's holders, for the few keys that have one: a message of
    /// the key that was delivered and came back (see
    /// `MessageRecord::holds_key`), with its place in delivery order. One,
    /// but a replace that moves a holder onto a key that has one makes
    /// two: the first in delivery order holds the key, as in the model.
    /// Apart from `KeyMem`, which every key with a message pays for.
    holders: HashMap<FlowKey, Vec<(ReadyKey, MessageId)>>,
    /// The queue's timer (its gate opens by time), as (timer key, deadline).
    timer: Option<(u64, u64)>,
}

/// The broker-wide part of flow control's memory: what changed since the
/// last `refresh_flow`, the next timer key, and when the broker opened.
pub(crate) struct Flows {
    /// Wall time of the broker's open: flow buckets start empty then.
    opened_at: u64,
    /// Flow keys and queues whose state changed since the last
    /// `refresh_flow`.
    dirty: BTreeSet<(QueueName, FlowKey)>,
    queues_dirty: BTreeSet<QueueName>,
    /// The next flow timer key to hand out.
    next_timer: u64,
}

impl Default for Flows {
    fn default() -> Self {
        Self {
            opened_at: 0,
            dirty: BTreeSet::new(),
            queues_dirty: BTreeSet::new(),
            next_timer: FLOW_TIMERS,
        }
    }
}

impl Flows {
    /// When the broker opened (a queue's buckets start empty then).
    pub fn opened_at(&self) -> u64 {
        self.opened_at
    }

    /// The broker reopened a store with queues at `now`: their buckets
    /// start empty now, so a restart grants no burst.
    pub fn reopened(&mut self, now: u64) {
        self.opened_at = now;
    }
}

/// One key's state: 80 bytes, beside its key in the map (its holder, which
/// few keys have, is in [`FlowMem::holders`]).
#[derive(Default)]
pub(crate) struct KeyMem {
    gate: GateState,
    /// Its messages in memory, in any state.
    live: u32,
    /// Its message in the queue's ready set, if any.
    head: Option<ReadyKey>,
    /// Its timer.
    timer: TimerSlot,
}

/// A timer as (timer key, deadline), or none, in 16 bytes: flow timer keys
/// start at [`FLOW_TIMERS`], so key 0 means none.
#[derive(Clone, Copy, Default)]
pub(crate) struct TimerSlot {
    id: u64,
    at: u64,
}

impl TimerSlot {
    pub fn get(self) -> Option<(u64, u64)> {
        (self.id != 0).then_some((self.id, self.at))
    }

    pub fn set(&mut self, timer: Option<(u64, u64)>) {
        let (id, at) = timer.unwrap_or_default();
        *self = Self { id, at };
    }
}

impl FlowMem {
    /// Ready messages held back by their key (not in the ready set).
    pub fn parked_len(&self) -> usize {
        self.parked.len()
    }

    /// Holds back a ready message of `key` (not its key's head).
    pub fn park(&mut self, key: FlowKey, position: ReadyKey, id: MessageId) {
        self.parked.insert((key, position), id);
    }

    /// The queue's own gate: its bucket, leased count and cooldown.
    pub fn gate(&self) -> &GateState {
        &self.gate
    }

    /// Flow memory for a queue with `config`, its bucket empty at the
    /// broker's open (`opened_at`): a restart grants no burst.
    pub fn new(config: Option<&FlowConfig>, opened_at: u64) -> Self {
        let mut mem = Self::default();
        if let Some(rate) = config.and_then(|f| f.rate.as_ref()) {
            mem.gate.bucket = Bucket::empty(rate, opened_at);
        }
        mem
    }
}

/// Gives a key map's memory back once it is at most a quarter full, so a
/// million keys that came and went leave no table behind (a `HashMap`
/// never shrinks by itself). Amortised: a shrink to twice the length
/// follows at least as many removals as it moves entries.
fn shrink_when_sparse<V>(keys: &mut HashMap<FlowKey, V>) {
    const MIN_CAPACITY: usize = 1024;
    if keys.capacity() > MIN_CAPACITY && keys.len() * 4 < keys.capacity() {
        keys.shrink_to((keys.len() * 2).max(MIN_CAPACITY));
    }
}

/// Whether a message of `q` is parked by key rather than put in the ready
/// set directly.
pub(crate) fn keyed<'a>(q: &QueueState, rec: &'a MessageRecord) -> Option<&'a FlowKey> {
    q.config().flow.as_ref().and(rec.key.as_ref())
}

impl State {
    /// Counts `rec` (entering memory in its state) in its queue's and key's
    /// flow memory. Called by `place` and `load`.
    pub(crate) fn flow_index(&mut self, queue: &QueueName, rec: &MessageRecord) {
        let opened_at = self.flows.opened_at;
        let Some(q) = self.queues.get_mut(queue) else {
            return;
        };
        let (Some(flow), mem) = q.flow_parts() else {
            return;
        };
        let leased = rec.state == delayd_core::MessageState::Leased;
        if leased {
            mem.gate.leased += 1;
        }
        let Some(key) = &rec.key else {
            return;
        };
        let km = mem.keys.entry(key.clone()).or_insert_with(|| {
            let mut km = KeyMem::default();
            if let Some(rate) = &flow.key_rate {
                km.gate.bucket = Bucket::empty(rate, opened_at);
            }
            km
        });
        km.live += 1;
        if leased {
            km.gate.leased += 1;
        }
        if rec.holds_key() {
            let holders = mem.holders.entry(key.clone()).or_default();
            if !holders.iter().any(|(_, id)| id == &rec.id) {
                holders.push(((rec.priority, rec.deliver_at, rec.seq), rec.id.clone()));
            }
        }
        self.flows.dirty.insert((queue.clone(), key.clone()));
    }

    /// Takes `rec` (leaving memory) out of its flow memory. Called by
    /// `unlink`: a lease that ends frees its slots here.
    pub(crate) fn flow_unindex(&mut self, queue: &QueueName, rec: &MessageRecord) {
        let Some(q) = self.queues.get_mut(queue) else {
            return;
        };
        if q.config().flow.is_none() {
            return;
        }
        let leased = rec.state == delayd_core::MessageState::Leased;
        if leased {
            q.flow.gate.leased = q.flow.gate.leased.saturating_sub(1);
            self.flows.queues_dirty.insert(queue.clone());
        }
        let Some(key) = &rec.key else {
            return;
        };
        if let Some(km) = q.flow.keys.get_mut(key) {
            km.live = km.live.saturating_sub(1);
            if leased {
                km.gate.leased = km.gate.leased.saturating_sub(1);
            }
            if let Some(holders) = q.flow.holders.get_mut(key) {
                holders.retain(|(_, id)| id != &rec.id);
                if holders.is_empty() {
                    q.flow.holders.remove(key);
                }
            }
            if rec.state == delayd_core::MessageState::Ready {
                let rk = (rec.priority, rec.deliver_at, rec.seq);
                if km.head == Some(rk) {
                    km.head = None;
                    let removed = q.ready.remove(&rk);
                    debug_assert!(removed.is_some(), "head of {key} missing from ready set");
                } else {
                    q.flow.parked.remove(&(key.clone(), rk));
                }
            }
        }
        self.flows.dirty.insert((queue.clone(), key.clone()));
    }

    /// Parks a ready keyed message (instead of the ready set). Its key is
    /// looked at again by the next [`refresh_flow`](Self::refresh_flow).
    pub(crate) fn park(&mut self, queue: &QueueName, key: &FlowKey, rec: &MessageRecord) {
        if let Some(q) = self.queues.get_mut(queue) {
            let rk = (rec.priority, rec.deliver_at, rec.seq);
            q.flow.parked.insert((key.clone(), rk), rec.id.clone());
        }
        self.flows.dirty.insert((queue.clone(), key.clone()));
    }

    /// Looks again at every key and queue whose flow state changed since
    /// the last look: promotes or demotes key heads, arms the timers of
    /// holds that time ends, forgets keys that are done, and notes queues
    /// whose waiting lease calls may now be served.
    pub(crate) fn refresh_flow(&mut self, now: u64, tx: &mut Tx) {
        for (queue, key) in std::mem::take(&mut self.flows.dirty) {
            self.refresh_key(&queue, &key, now, tx);
        }
        for queue in std::mem::take(&mut self.flows.queues_dirty) {
            self.arm_queue_gate(&queue, now, tx);
            if self.waiters.waiting_on(&queue)
                && self
                    .first_ready(std::slice::from_ref(&queue), now)
                    .is_some()
            {
                tx.note_ready(&queue);
            }
        }
    }

    fn refresh_key(&mut self, queue: &QueueName, key: &FlowKey, now: u64, tx: &mut Tx) {
        let waited_on = self.waiters.waiting_on(queue);
        let Some(q) = self.queues.get_mut(queue) else {
            return;
        };
        let Some(flow) = q.config().flow.clone() else {
            return;
        };
        let Some(km) = q.flow.keys.get_mut(key) else {
            return;
        };
        // The key's next message: its head (in the ready set) or one of its
        // parked messages. Most looks (a keyed enqueue behind a head that is
        // still first, an ack of another of the key's messages) find the
        // head again and move nothing.
        let next = keys_next_ready(
            &q.messages,
            &q.flow.parked,
            &flow,
            q.flow
                .holders
                .get(key)
                .and_then(|h| h.iter().min())
                .map(|(_, id)| id),
            km.head,
            key,
        );
        let mut wake = None;
        let head = match next.map(|rk| (rk, flow.admit_key(&km.gate, now))) {
            Some((rk, Ok(()))) => Some(rk),
            Some((_, Err(hold))) => {
                metrics::counter!(metric::FLOW_HELD_TOTAL,
                    "queue" => queue.to_string(), "reason" => hold.reason())
                .increment(1);
                wake = hold.until();
                None
            }
            None => None,
        };
        if km.head != head {
            if let Some(rk) = km.head.take() {
                if let Some(id) = q.ready.remove(&rk) {
                    q.flow.parked.insert((key.clone(), rk), id);
                }
            }
            if let Some(rk) = head {
                if let Some(id) = q.flow.parked.remove(&(key.clone(), rk)) {
                    q.ready.insert(rk, id);
                    km.head = Some(rk);
                }
            }
        }
        if km.head.is_some() && waited_on {
            tx.note_ready(queue);
        }
        let forget = km.live == 0 && km.gate.is_idle(now);
        if km.live == 0 && !forget {
            wake = Some(wake.map_or(km.gate.idle_at(), |w| w.min(km.gate.idle_at())));
        }
        let old_timer = km.timer.get();
        if forget {
            q.flow.keys.remove(key);
            shrink_when_sparse(&mut q.flow.keys);
            if let Some((id, _)) = old_timer {
                self.timers.cancel(id);
            }
            return;
        }
        let target = TimerTarget::FlowKey(queue.clone(), key.clone());
        let timer = self.rearm(old_timer, wake, target, now, tx);
        if let Some(km) = self
            .queues
            .get_mut(queue)
            .and_then(|q| q.flow.keys.get_mut(key))
        {
            km.timer.set(timer);
        }
    }

    /// Arms (or drops) the queue's timer for when its own gate opens by
    /// time (rate, cooldown).
    fn arm_queue_gate(&mut self, queue: &QueueName, now: u64, tx: &mut Tx) {
        let Some(q) = self.queues.get(queue) else {
            return;
        };
        let Some(flow) = &q.config().flow else {
            return;
        };
        let hold = flow.admit_queue(&q.flow.gate, now).err();
        if let Some(hold) = hold.filter(|_| !q.ready.is_empty()) {
            // Ready messages wait for the queue's own gate (a queue-wide
            // rate, concurrency or cooldown), as a key's do for its gate.
            metrics::counter!(metric::FLOW_HELD_TOTAL,
                "queue" => queue.to_string(), "reason" => hold.reason())
            .increment(1);
        }
        let wake = hold.and_then(Hold::until);
        let old = q.flow.timer;
        let timer = self.rearm(old, wake, TimerTarget::FlowQueue(queue.clone()), now, tx);
        if let Some(q) = self.queues.get_mut(queue) {
            q.flow.timer = timer;
        }
    }

    /// Keeps one timer at `wake` (cancelling `old` when it differs).
    fn rearm(
        &mut self,
        old: Option<(u64, u64)>,
        wake: Option<u64>,
        target: TimerTarget,
        now: u64,
        tx: &mut Tx,
    ) -> Option<(u64, u64)> {
        if old.map(|(_, at)| at) == wake {
            return old;
        }
        if let Some((id, _)) = old {
            self.timers.cancel(id);
        }
        let at = wake?;
        let id = self.flows.next_timer;
        self.flows.next_timer += 1;
        if self.timers.insert(id, at, target, now) {
            tx.wake_driver = true;
        }
        Some((id, at))
    }

    /// A flow timer fired: look at its key or queue again.
    pub(crate) fn flow_timer_fired(&mut self, target: TimerTarget) {
        match target {
            TimerTarget::FlowKey(queue, key) => {
                if let Some(km) = self
                    .queues
                    .get_mut(&queue)
                    .and_then(|q| q.flow.keys.get_mut(&key))
                {
                    km.timer = TimerSlot::default();
                }
                self.flows.dirty.insert((queue, key));
            }
            TimerTarget::FlowQueue(queue) => {
                if let Some(q) = self.queues.get_mut(&queue) {
                    q.flow.timer = None;
                }
                self.flows.queues_dirty.insert(queue);
            }
            _ => {}
        }
    }

    /// Spends the tokens of a delivery of `rec` from `queue` at `now`
    /// (the caller admitted it).
    pub(crate) fn flow_take(&mut self, queue: &QueueName, rec: &MessageRecord, now: u64) {
        let Some(q) = self.queues.get_mut(queue) else {
            return;
        };
        let (Some(flow), mem) = q.flow_parts() else {
            return;
        };
        let key_gate = rec
            .key
            .as_ref()
            .and_then(|k| mem.keys.get_mut(k))
            .map(|km| &mut km.gate);
        flow.take(&mut mem.gate, key_gate, now);
        self.flows.queues_dirty.insert(queue.clone());
    }

    /// A deferral at `now` until `until`: the key (without one, the queue)
    /// cools down until then.
    pub(crate) fn cool_down(&mut self, queue: &QueueName, key: Option<&FlowKey>, until: u64) {
        let Some(q) = self.queues.get_mut(queue) else {
            return;
        };
        let gate = match key {
            Some(key) => match q.flow.keys.get_mut(key) {
                Some(km) => &mut km.gate,
                None => return,
            },
            None => &mut q.flow.gate,
        };
        gate.cooling_until = gate.cooling_until.max(until);
        match key {
            Some(key) => {
                self.flows.dirty.insert((queue.clone(), key.clone()));
            }
            None => {
                self.flows.queues_dirty.insert(queue.clone());
            }
        }
    }

    /// Rebuilds a queue's flow memory after its `flow` changed: keeps the
    /// buckets and cooldowns of the keys that stay, re-derives every count
    /// from the messages in memory, and sorts the ready messages again.
    pub(crate) fn rebuild_flow(&mut self, queue: &QueueName, now: u64, tx: &mut Tx) {
        let opened_at = self.flows.opened_at;
        let Some(q) = self.queues.get_mut(queue) else {
            return;
        };
        let old = q.replace_flow(FlowMem::default());
        for (id, _) in old.keys.values().filter_map(|k| k.timer.get()) {
            self.timers.cancel(id);
        }
        if let Some((id, _)) = old.timer {
            self.timers.cancel(id);
        }
        let Some(q) = self.queues.get_mut(queue) else {
            return;
        };
        let mut fresh = FlowMem::new(q.config().flow.as_ref(), opened_at);
        fresh.gate.bucket = old.gate.bucket;
        fresh.gate.cooling_until = old.gate.cooling_until;
        q.replace_flow(fresh);
        // Every ready message back in the ready set, then sorted anew.
        for (k, id) in old.parked {
            q.ready.insert(k.1, id);
        }
        let records: Vec<MessageRecord> = q.messages.values().cloned().collect();
        let ready_keyed: Vec<(ReadyKey, FlowKey)> = records
            .iter()
            .filter(|r| r.state == delayd_core::MessageState::Ready)
            .filter_map(|r| keyed(q, r).map(|k| ((r.priority, r.deliver_at, r.seq), k.clone())))
            .collect();
        for (rk, key) in ready_keyed {
            if let Some(id) = q.ready.remove(&rk) {
                q.flow.parked.insert((key, rk), id);
            }
        }
        for rec in &records {
            self.flow_index(queue, rec);
        }
        if let Some(q) = self.queues.get_mut(queue) {
            for (key, kept) in old.keys {
                if let Some(km) = q.flow.keys.get_mut(&key) {
                    km.gate.bucket = kept.gate.bucket;
                    km.gate.cooling_until = kept.gate.cooling_until;
                }
            }
        }
        self.flows.queues_dirty.insert(queue.clone());
        self.refresh_flow(now, tx);
    }

    /// `GET /v1/queues/{queue}/keys/{key}` from memory (`records`: the
    /// queue's messages of the key not in memory, read from disk by the
    /// caller).
    pub(crate) fn key_info(
        &self,
        queue: &QueueName,
        key: &FlowKey,
        on_disk: &[MessageRecord],
        now: u64,
    ) -> delayd_core::BrokerResult<KeyInfo> {
        let q = self.queue(queue)?;
        let mut info = KeyInfo::empty(key.clone());
        let in_memory = q.messages.values().filter(|r| r.key.as_ref() == Some(key));
        let mut seen = BTreeSet::new();
        for rec in in_memory.chain(on_disk.iter()) {
            if !seen.insert(rec.seq) {
                continue;
            }
            let state = match rec.state {
                delayd_core::MessageState::Scheduled if rec.deliver_at <= now => {
                    delayd_core::MessageState::Ready
                }
                other => other,
            };
            match state {
                delayd_core::MessageState::Scheduled => info.scheduled += 1,
                delayd_core::MessageState::Ready => info.ready += 1,
                delayd_core::MessageState::Leased => info.leased += 1,
                delayd_core::MessageState::Dead => info.dead += 1,
                // Records in the store are live; ended ones are kept apart.
                delayd_core::MessageState::Acked | delayd_core::MessageState::Cancelled => {}
            }
        }
        info.cooling_until = q
            .flow
            .keys
            .get(key)
            .map(|km| km.gate.cooling_until)
            .filter(|&until| until > now);
        Ok(info)
    }
}

/// The ready position of the key's next message ([`flow::keys_next`]),
/// among its head (in the ready set) and its parked messages: with
/// `ordered` and a holder, the holder's when it is ready (none while it
/// waits); else the first of them in delivery order.
fn keys_next_ready(
    messages: &crate::state::Messages,
    parked: &BTreeMap<(FlowKey, ReadyKey), MessageId>,
    flow: &FlowConfig,
    holder: Option<&MessageId>,
    head: Option<ReadyKey>,
    key: &FlowKey,
) -> Option<ReadyKey> {
    let holders_place = holder.map(|id| {
        messages
            .get(id)
            .map(|rec| (rec.priority, rec.deliver_at, rec.seq))
            .filter(|&rk| head == Some(rk) || parked.contains_key(&(key.clone(), rk)))
    });
    flow::keys_next(flow.ordered, holders_place, || {
        let first_parked = parked
            .range((key.clone(), (0, 0, 0))..)
            .next()
            .filter(|((k, _), _)| k == key)
            .map(|((_, rk), _)| *rk);
        Some(match (head, first_parked) {
            (Some(head), Some(parked)) => Some(head.min(parked)),
            (head, parked) => head.or(parked),
        })
    })
    .flatten()
}

/// The flow key counts of a queue's stats: keys kept, keys cooling down.
pub(crate) fn key_counts(q: &QueueState, now: u64) -> (u64, u64) {
    let cooling = q
        .flow
        .keys
        .values()
        .filter(|km| km.gate.cooling_until > now)
        .count();
    (q.flow.keys.len() as u64, cooling as u64)
}

#[cfg(test)]
mod size_tests {
    /// A key's map entry is what each key with a message costs (docs/
    /// BENCHMARKS.md, "Memory per key"): keep it from growing unnoticed.
    #[test]
    fn a_keys_entry_stays_small() {
        let key = std::mem::size_of::<delayd_core::FlowKey>();
        let state = std::mem::size_of::<super::KeyMem>();
        assert!(state <= 80, "KeyMem is {state} bytes");
        assert!(key + state <= 104, "a key's entry is {} bytes", key + state);
    }

    /// 200,000 keys that came and went leave a small table, and the
    /// shrinking costs no more than the removals: each shrink follows at
    /// least as many removals as it keeps entries.
    #[test]
    fn a_key_map_gives_its_memory_back() {
        let mut keys = std::collections::HashMap::new();
        for i in 0..200_000u32 {
            let key =
                delayd_core::FlowKey::new(format!("k{i}")).unwrap_or_else(|e| panic!("key: {e}"));
            keys.insert(key, i);
        }
        let full = keys.capacity();
        let mut shrinks = 0;
        for i in 0..200_000u32 {
            let key =
                delayd_core::FlowKey::new(format!("k{i}")).unwrap_or_else(|e| panic!("key: {e}"));
            keys.remove(&key);
            let before = keys.capacity();
            super::shrink_when_sparse(&mut keys);
            if keys.capacity() < before {
                shrinks += 1;
                assert!(
                    keys.len() * 4 < before,
                    "shrunk while a quarter full or more"
                );
            }
        }
        assert!(keys.is_empty());
        assert!(full >= 200_000);
        assert!(
            keys.capacity() <= 2 * 1024,
            "{} slots left",
            keys.capacity()
        );
        assert!(shrinks <= 10, "{shrinks} shrinks for 200,000 removals");
    }
}
