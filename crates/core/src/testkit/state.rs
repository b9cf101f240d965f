//! The model's state machine: plain data and synchronous transitions, each
//! given the wall time `now` as an argument. [`super::model::ModelBroker`]
//! wraps it in a mutex and adds waiting; keeping the rules here, free of
//! locks and futures, lets a reader check them line by line against api.md.
//!
//! Readiness is never stored: a `Scheduled` message whose `deliver_at <= now`
//! *is* ready, and [`State::settle`] re-derives that (and applies expired
//! leases) at the start of every call. Slow, but obviously right.

use std::collections::{BTreeMap, BTreeSet};

use tokio::time::Instant;

use crate::error::{BrokerError, BrokerResult};
use crate::events::{DeathReason, Event, EventKind, History, Via};
use crate::message::{
    Delivery, EnqueueOutcome, EnqueueRequest, Message, MessageCounters, MessageState, OnConflict,
    Replacement,
};
use crate::model::{
    LeaseId, MessageId, QueueConfig, QueueInfo, QueueName, QueueStats, DEFAULT_PRIORITY,
};
use crate::recurring::{ScheduleId, ScheduleRecord};

/// Priorities below this count as urgent in [`QueueStats::ready_urgent`].
const URGENT_BELOW: u32 = 1024;

#[derive(Debug)]
pub(crate) struct QueueState {
    pub config: QueueConfig,
    /// `None`: running. `Some(None)`: paused until resumed.
    /// `Some(Some(t))`: paused until wall time `t`.
    pub pause: Option<Option<u64>>,
    /// Which creation of this name it is, so a waiting lease can tell that
    /// its queue was deleted even when it was created again meanwhile.
    pub incarnation: u64,
    /// Buckets and cooldowns of its flow control (module `flow`).
    pub flow: super::flow::FlowState,
}

impl QueueState {
    pub fn paused(&self, now: u64) -> bool {
        match self.pause {
            None => false,
            Some(None) => true,
            Some(Some(until)) => until > now,
        }
    }
}

/// One live message plus what `Message` does not carry: the id of its
/// current lease, its history, and (leased only) the successor a replace
/// or debounce left for when the lease ends.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub msg: Message,
    pub lease: Option<LeaseId>,
    pub history: History,
    pub successor: Option<Replacement>,
}

impl Stored {
    /// Appends an event at `at`, with the attempt number as it is now
    /// (after the transition).
    pub fn record(&mut self, at: u64, kind: EventKind) {
        let attempt = self.msg.attempts;
        self.history.push(Event { at, attempt, kind });
    }
}

/// An ended message kept for its queue's `retain_ms`: payload emptied,
/// state `Acked` or `Cancelled`, with its history and the time it goes.
#[derive(Debug, Clone)]
pub(crate) struct Retained {
    pub msg: Message,
    pub history: History,
    pub until: u64,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub queues: BTreeMap<QueueName, QueueState>,
    /// Keyed by (queue, id): an id is unique within its queue only.
    pub messages: BTreeMap<(QueueName, MessageId), Stored>,
    /// Ended messages kept for their queue's `retain_ms` (payload
    /// emptied, state `Acked` or `Cancelled`), with the time they go.
    pub retained: BTreeMap<(QueueName, MessageId), Retained>,
    /// Keyed by (queue, schedule id), so a queue's schedules list by id.
    pub schedules: BTreeMap<(QueueName, ScheduleId), ScheduleRecord>,
    /// Wall and tokio time of the last settle, to tell a wall-clock jump
    /// from time passing.
    pub settled: Option<(u64, Instant)>,
    /// The last `seq` handed out (0: none yet).
    pub last_seq: u64,
    /// Queues created so far (the last [`QueueState::incarnation`]).
    pub queues_created: u64,
    pub shut_down: bool,
}

impl State {
    pub fn check_open(&self) -> BrokerResult<()> {
        if self.shut_down {
            return Err(BrokerError::unavailable("broker is shut down"));
        }
        Ok(())
    }

    /// Applies everything that time alone causes up to wall time `now`
    /// (`mono`: tokio's time now): expired leases fail their attempt, due
    /// schedules fire, due messages become ready (and, after a clock step
    /// back, ready ones scheduled again), timed pauses end. Expiries and
    /// fires are applied in the order they happened (module `firing` says
    /// when a fire happened). Returns whether anything changed (waiters
    /// should look again).
    pub fn settle(&mut self, now: u64, mono: Instant) -> bool {
        let behind = self.wall_jump(now, mono);
        let mut changed = false;
        for queue in self.queues.values_mut() {
            if let Some(Some(until)) = queue.pause {
                if until <= now {
                    queue.pause = None;
                    changed = true;
                }
            }
        }
        // Schedules fired in this call: their cursor was set after the jump.
        let mut rearmed = BTreeSet::new();
        loop {
            let expiry = self.first_expiry(now);
            let fire = self.first_fire(now, behind, &rearmed);
            match (expiry, fire) {
                (Some((until, key)), fire) if fire.as_ref().is_none_or(|f| until <= f.0) => {
                    if !self.settle_one(&key, now) {
                        debug_assert!(false, "lease of {key:?} expired but stays");
                        break;
                    }
                }
                (_, Some((moment, key))) => {
                    if !self.fire_step(&key, moment) {
                        debug_assert!(false, "schedule {key:?} due but does not advance");
                        break;
                    }
                    rearmed.insert(key);
                }
                // Nothing expired and nothing due (the guard covers the
                // rest).
                _ => break,
            }
            changed = true;
        }
        let keys: Vec<_> = self.messages.keys().cloned().collect();
        for key in keys {
            changed |= self.settle_one(&key, now);
        }
        self.forget_idle_keys(now);
        self.retained.retain(|_, r| r.until > now);
        changed
    }

    /// Ends the live message `key` at `now` as `how` (`Acked` or
    /// `Cancelled`): gone, or retained without its payload when its queue
    /// keeps ended messages. `None` when no such message lives.
    pub fn end(&mut self, key: &(QueueName, MessageId), how: MessageState, now: u64) -> Option<()> {
        debug_assert!(how.ended(), "{how} is not an end");
        let mut stored = self.messages.remove(key)?;
        let until = self
            .queues
            .get(&key.0)
            .and_then(|q| q.config.retained_until(now));
        if let Some(until) = until {
            stored.lease = None;
            let kind = match how {
                MessageState::Acked => EventKind::Acked,
                _ => EventKind::Cancelled,
            };
            stored.record(now, kind);
            let mut msg = stored.msg;
            msg.state = how;
            msg.ended_at = Some(now);
            msg.payload = Vec::new();
            msg.lease_until = None;
            msg.died_at = None;
            let retained = Retained {
                msg,
                history: stored.history,
                until,
            };
            self.retained.insert(key.clone(), retained);
        }
        Some(())
    }

    /// The message `id` of `queue` as `get` shows it: live, or retained.
    pub fn shown(&self, queue: &QueueName, id: &MessageId) -> BrokerResult<Message> {
        let key = (queue.clone(), id.clone());
        match (self.messages.get(&key), self.retained.get(&key)) {
            (Some(stored), _) => Ok(stored.msg.clone()),
            (None, Some(r)) => Ok(r.msg.clone()),
            (None, None) => Err(not_found(queue, id)),
        }
    }

    /// The history of the message `id` of `queue`: live, or retained.
    pub fn history(&self, queue: &QueueName, id: &MessageId) -> BrokerResult<History> {
        let key = (queue.clone(), id.clone());
        match (self.messages.get(&key), self.retained.get(&key)) {
            (Some(stored), _) => Ok(stored.history.clone()),
            (None, Some(r)) => Ok(r.history.clone()),
            (None, None) => Err(not_found(queue, id)),
        }
    }

    /// How far the wall clock jumped forward since the last settle, beyond
    /// the time that passed (0 without a jump); records this settle.
    fn wall_jump(&mut self, now: u64, mono: Instant) -> u64 {
        let jump = match self.settled {
            Some((wall, at)) => {
                let passed = mono.saturating_duration_since(at).as_millis() as u64;
                now.saturating_sub(wall).saturating_sub(passed)
            }
            None => 0,
        };
        self.settled = Some((now, mono));
        jump
    }

    /// The leased message whose lease expired first (at or before `now`).
    fn first_expiry(&self, now: u64) -> Option<(u64, (QueueName, MessageId))> {
        self.messages
            .iter()
            .filter(|(_, s)| s.msg.state == MessageState::Leased)
            .filter_map(|(key, s)| s.msg.lease_until.map(|until| (until, key.clone())))
            .filter(|(until, _)| *until <= now)
            .min()
    }

    /// Enqueues one message into `queue` (which exists): `created: false`
    /// and no change when its id is live there.
    pub fn enqueue(
        &mut self,
        queue: &QueueName,
        request: EnqueueRequest,
        now: u64,
    ) -> BrokerResult<EnqueueOutcome> {
        request.validate()?;
        crate::check_deliver_at(request.deliver_at(now))?;
        let id = request.id.clone().unwrap_or_else(MessageId::generate);
        let key = (queue.clone(), id.clone());
        if let Some(stored) = self.messages.get_mut(&key) {
            return conflict(stored, &request, now);
        }
        // A retained message holds its id for `keep` only.
        if let Some(r) = self.retained.get(&key) {
            if request.on_conflict == OnConflict::Keep {
                let (seq, deliver_at) = (r.msg.seq, r.msg.deliver_at);
                return Ok(EnqueueOutcome::duplicate(id, seq, deliver_at));
            }
            self.retained.remove(&key);
        }
        let seq = self.next_seq();
        let deliver_at = request.deliver_at(now);
        let msg = Message {
            queue: queue.clone(),
            id: id.clone(),
            seq,
            state: waiting_state(deliver_at, now),
            deliver_at,
            enqueued_at: now,
            priority: request.priority.unwrap_or(DEFAULT_PRIORITY),
            attempts: 0,
            max_attempts: request.max_attempts,
            lease_ms: request.lease_ms,
            lease_until: None,
            died_at: None,
            counters: MessageCounters::default(),
            headers: request.headers,
            payload: request.payload,
            key: request.key,
            deferrals: 0,
            last_error: None,
            ended_at: None,
        };
        let mut stored = Stored {
            msg,
            lease: None,
            history: History::default(),
            successor: None,
        };
        stored.record(now, EventKind::Enqueued);
        self.messages.insert(key, stored);
        Ok(EnqueueOutcome::created(id, seq, deliver_at))
    }

    /// Ends the leased message `key` with an ack at `now`: gone (or
    /// retained), and its successor, if it has one, enqueued as a new
    /// message with its id.
    pub fn ack(&mut self, key: &(QueueName, MessageId), now: u64) {
        let successor = self.messages.get_mut(key).and_then(|s| s.successor.take());
        self.end(key, MessageState::Acked, now);
        if let Some(next) = successor {
            self.retained.remove(key);
            let created = self.enqueue(&key.0, next.into_request(key.1.clone()), now);
            debug_assert!(created.is_ok_and(|o| o.created), "successor of {key:?}");
        }
    }

    /// Deletes the message `current` (settled at `now`) wrote ahead for a
    /// later fire time, which a change at `now` cancels, unless a worker
    /// holds it (a client moved it forward and leased it).
    pub fn cancel_written_ahead(&mut self, current: &ScheduleRecord, now: u64) {
        let queue = &current.queue;
        let cancelled = current.cancelled_by_change(now, |id| {
            let state = self
                .messages
                .get(&(queue.clone(), id.clone()))
                .map(|s| s.msg.state);
            Ok::<_, std::convert::Infallible>(state)
        });
        if let Ok(Some(id)) = cancelled {
            self.messages.remove(&(queue.clone(), id));
        }
    }

    /// The schedule `id` of `queue`, or the error api.md prescribes.
    pub fn schedule(&self, queue: &QueueName, id: &ScheduleId) -> BrokerResult<&ScheduleRecord> {
        self.config(queue)?;
        self.schedules
            .get(&(queue.clone(), id.clone()))
            .ok_or_else(|| BrokerError::ScheduleNotFound {
                queue: queue.clone(),
                id: id.clone(),
            })
    }

    fn settle_one(&mut self, key: &(QueueName, MessageId), now: u64) -> bool {
        let config = match self.queues.get(&key.0) {
            Some(q) => q.config.clone(),
            None => return false,
        };
        let Some(stored) = self.messages.get_mut(key) else {
            return false;
        };
        let mut changed = false;
        if let (MessageState::Leased, Some(until)) = (stored.msg.state, stored.msg.lease_until) {
            if now >= until {
                expire(stored, &config, until);
                changed = true;
            }
        }
        // Readiness is derived from the clock both ways, so a wall clock
        // stepped back makes a message wait again rather than fire early.
        let m = &mut stored.msg;
        if matches!(m.state, MessageState::Scheduled | MessageState::Ready) {
            let derived = waiting_state(m.deliver_at, now);
            changed |= derived != m.state;
            m.state = derived;
        }
        changed
    }

    /// Creates `name` with `config` unless it exists.
    pub fn create_queue(&mut self, name: &QueueName, config: QueueConfig) {
        if !self.queues.contains_key(name) {
            self.queues_created += 1;
            let queue = QueueState {
                config,
                pause: None,
                incarnation: self.queues_created,
                flow: Default::default(),
            };
            self.queues.insert(name.clone(), queue);
        }
    }

    /// Whether every queue in `watched` still exists as that incarnation.
    pub fn all_alive(&self, watched: &[(QueueName, u64)]) -> bool {
        watched
            .iter()
            .all(|(name, inc)| self.queues.get(name).map(|q| q.incarnation) == Some(*inc))
    }

    /// The incarnations of those of `names` that exist now.
    pub fn incarnations(&self, names: &[QueueName]) -> Vec<(QueueName, u64)> {
        names
            .iter()
            .filter_map(|n| self.queues.get(n).map(|q| (n.clone(), q.incarnation)))
            .collect()
    }

    /// Checks the invariants every state between calls keeps.
    pub fn debug_check(&self, now: u64) {
        if !cfg!(debug_assertions) {
            return;
        }
        for ((queue, id), stored) in &self.messages {
            let m = &stored.msg;
            let ctx = format!("{queue}/{id} at {now}: {m:?}");
            debug_assert!(self.queues.contains_key(queue), "orphan message {ctx}");
            debug_assert!(m.seq >= 1 && m.seq <= self.last_seq, "bad seq {ctx}");
            let leased = m.state == MessageState::Leased;
            debug_assert_eq!(leased, stored.lease.is_some(), "lease id {ctx}");
            debug_assert!(leased || stored.successor.is_none(), "successor {ctx}");
            debug_assert_eq!(leased, m.lease_until.is_some(), "lease_until {ctx}");
            debug_assert!(!leased || m.attempts >= 1, "leased, no attempt {ctx}");
            let dead = m.state == MessageState::Dead;
            debug_assert_eq!(dead, m.died_at.is_some(), "died_at {ctx}");
            debug_assert!(m.ended_at.is_none(), "live with ended_at {ctx}");
            match m.state {
                MessageState::Scheduled => debug_assert!(m.deliver_at > now, "due {ctx}"),
                MessageState::Ready => debug_assert!(m.deliver_at <= now, "early {ctx}"),
                MessageState::Leased => {
                    debug_assert!(m.lease_until > Some(now), "expired {ctx}");
                }
                MessageState::Dead => {}
                MessageState::Acked | MessageState::Cancelled => {
                    debug_assert!(false, "an ended message among the live {ctx}");
                }
            }
        }
        for ((queue, id), r) in &self.retained {
            let m = &r.msg;
            let ctx = format!("retained {queue}/{id} at {now}: {m:?}");
            debug_assert!(self.queues.contains_key(queue), "orphan {ctx}");
            debug_assert!(m.state.ended() && m.ended_at.is_some(), "not ended {ctx}");
            debug_assert!(r.until > now, "kept past its time {ctx}");
            debug_assert!(m.payload.is_empty(), "payload kept {ctx}");
        }
        for ((queue, id), record) in &self.schedules {
            let ctx = format!("schedule {queue}/{id} at {now}: {record:?}");
            debug_assert!(self.queues.contains_key(queue), "orphan {ctx}");
            debug_assert!(!record.needs_step(now), "not stepped {ctx}");
            debug_assert!(!record.settled(now).is_due(now), "not fired {ctx}");
            debug_assert!(
                !record.definition.paused || record.next_fire_at.is_none(),
                "paused with a cursor {ctx}"
            );
        }
    }

    pub fn next_seq(&mut self) -> u64 {
        self.last_seq += 1;
        self.last_seq
    }

    pub fn stored_mut(&mut self, queue: &QueueName, id: &MessageId) -> BrokerResult<&mut Stored> {
        self.messages
            .get_mut(&(queue.clone(), id.clone()))
            .ok_or_else(|| not_found(queue, id))
    }

    /// The message leased under `lease`, or the error api.md prescribes.
    pub fn leased_mut(
        &mut self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
    ) -> BrokerResult<&mut Stored> {
        let stored = self.stored_mut(queue, id)?;
        if stored.msg.state != MessageState::Leased || stored.lease.as_ref() != Some(lease) {
            return Err(BrokerError::LeaseMismatch {
                id: id.clone(),
                lease: lease.to_string(),
            });
        }
        Ok(stored)
    }

    pub fn config(&self, queue: &QueueName) -> BrokerResult<QueueConfig> {
        self.queues
            .get(queue)
            .map(|q| q.config.clone())
            .ok_or_else(|| BrokerError::QueueNotFound(queue.clone()))
    }

    pub fn info(&self, name: &QueueName, now: u64) -> BrokerResult<QueueInfo> {
        let queue = self
            .queues
            .get(name)
            .ok_or_else(|| BrokerError::QueueNotFound(name.clone()))?;
        let mut stats = QueueStats::default();
        for stored in self.in_queue(name) {
            let m = &stored.msg;
            match m.state {
                MessageState::Scheduled => stats.scheduled += 1,
                MessageState::Ready => {
                    stats.ready += 1;
                    if m.priority < URGENT_BELOW {
                        stats.ready_urgent += 1;
                    }
                }
                MessageState::Leased => stats.leased += 1,
                MessageState::Dead => stats.dead += 1,
                // Never among the live messages (`debug_check`).
                MessageState::Acked | MessageState::Cancelled => {}
            }
        }
        let (flow_keys, cooling_keys) = self.key_counts(name, now);
        stats.flow_keys = flow_keys;
        stats.cooling_keys = cooling_keys;
        let paused = queue.paused(now);
        Ok(QueueInfo {
            name: name.clone(),
            config: queue.config.clone(),
            paused,
            paused_until: match queue.pause {
                Some(Some(until)) if paused => Some(until),
                _ => None,
            },
            stats,
        })
    }

    pub fn in_queue<'a>(&'a self, name: &'a QueueName) -> impl Iterator<Item = &'a Stored> + 'a {
        self.messages
            .iter()
            .filter(move |((q, _), _)| q == name)
            .map(|(_, s)| s)
    }

    /// Keys of the ready messages of the unpaused `queues`, in delivery
    /// order (priority, deliver_at, seq).
    pub fn ready_order(&self, queues: &[QueueName], now: u64) -> Vec<(QueueName, MessageId)> {
        let mut ready: Vec<_> = self
            .messages
            .iter()
            .filter(|((q, _), s)| {
                s.msg.state == MessageState::Ready
                    && queues.contains(q)
                    && self.queues.get(q).is_some_and(|qs| !qs.paused(now))
            })
            .map(|(k, s)| ((s.msg.priority, s.msg.deliver_at, s.msg.seq), k.clone()))
            .collect();
        ready.sort();
        ready.into_iter().map(|(_, k)| k).collect()
    }

    /// The earliest future wall time at which something in `queues` can
    /// change by itself (a message due, a lease expiring, a pause ending, a
    /// schedule firing).
    pub fn next_event(&self, queues: &[QueueName], now: u64) -> Option<u64> {
        let messages = self
            .messages
            .iter()
            .filter(|((q, _), _)| queues.contains(q))
            .filter_map(|(_, s)| match s.msg.state {
                MessageState::Scheduled => Some(s.msg.deliver_at),
                MessageState::Leased => s.msg.lease_until,
                _ => None,
            });
        let pauses = queues
            .iter()
            .filter_map(|q| self.queues.get(q))
            .filter_map(|q| q.pause.flatten());
        let fires = self
            .schedules
            .iter()
            .filter(|((q, _), _)| queues.contains(q))
            .filter_map(|(_, record)| record.wake_at());
        messages
            .chain(pauses)
            .chain(fires)
            .chain(self.flow_events(queues, now))
            .filter(|t| *t > now)
            .min()
    }
}

/// Hands `stored` out under a fresh lease of `lease_ms` from `now`, by
/// the frontend `via`.
pub(crate) fn deliver(stored: &mut Stored, now: u64, lease_ms: u64, via: Via) -> Delivery {
    let lease = LeaseId::generate();
    let lease_until = now.saturating_add(lease_ms);
    stored.lease = Some(lease.clone());
    let m = &mut stored.msg;
    m.state = MessageState::Leased;
    m.attempts += 1;
    m.lease_until = Some(lease_until);
    m.died_at = None;
    stored.record(now, EventKind::Leased { lease_until, via });
    let m = &stored.msg;
    Delivery {
        queue: m.queue.clone(),
        id: m.id.clone(),
        seq: m.seq,
        lease_id: lease,
        lease_until: now.saturating_add(lease_ms),
        attempt: m.attempts,
        deliver_at: m.deliver_at,
        priority: m.priority,
        headers: m.headers.clone(),
        payload: m.payload.clone(),
        key: m.key.clone(),
    }
}

/// The lease of `stored` ended at `at` with nobody answering (it ran out,
/// or a restart ended it): a failed attempt, timed from then.
pub(crate) fn expire(stored: &mut Stored, config: &QueueConfig, at: u64) {
    stored.msg.counters.timeouts += 1;
    stored.record(at, EventKind::Expired);
    fail_attempt(stored, config, at, None, true);
}

/// A failed delivery at wall time `at` (a nack's now, or a lease's expiry):
/// dead when it may die and is out of attempts, else scheduled again after
/// `delay_ms` or the queue's backoff.
pub(crate) fn fail_attempt(
    stored: &mut Stored,
    config: &QueueConfig,
    at: u64,
    delay_ms: Option<u64>,
    may_die: bool,
) {
    stored.lease = None;
    let m = &mut stored.msg;
    m.lease_until = None;
    // A failure ends a run of deferrals.
    m.deferrals = 0;
    if may_die && config.exhausted(m.attempts, m.max_attempts) {
        kill(m, at);
        stored.record(
            at,
            EventKind::Dead {
                reason: DeathReason::MaxAttempts,
            },
        );
    } else {
        let delay = delay_ms.unwrap_or_else(|| config.retry.delay_with_jitter(m.attempts));
        m.deliver_at = at.saturating_add(delay);
        m.state = MessageState::Scheduled;
    }
    take_successor(stored, at);
}

/// The lease of `stored` ended at `at` in a retry or a death (its state
/// is set): its successor, if any, takes effect. After a retry the
/// message takes the successor's content and is due at the later of its
/// retry time and the successor's; after a death the successor takes its
/// place (redriven: its content and due time, attempts 0).
pub(crate) fn take_successor(stored: &mut Stored, at: u64) {
    let Some(next) = stored.successor.take() else {
        return;
    };
    let m = &mut stored.msg;
    next.apply_content(m);
    if m.state == MessageState::Dead {
        m.deliver_at = next.deliver_at;
        m.attempts = 0;
        m.deferrals = 0;
        m.died_at = None;
        m.state = waiting_state(m.deliver_at, at);
        stored.record(at, EventKind::Redriven);
    } else {
        m.deliver_at = m.deliver_at.max(next.deliver_at);
        m.state = waiting_state(m.deliver_at, at);
    }
}

/// An enqueue of the id of the live message `stored` at `now`: a
/// duplicate (`keep`), or a replace or debounce: of a waiting message at
/// once, of a leased one as its successor; a dead one is not replaced.
fn conflict(
    stored: &mut Stored,
    request: &EnqueueRequest,
    now: u64,
) -> BrokerResult<EnqueueOutcome> {
    let m = &mut stored.msg;
    let (id, seq) = (m.id.clone(), m.seq);
    if request.on_conflict == OnConflict::Keep {
        return Ok(EnqueueOutcome::duplicate(id, seq, m.deliver_at));
    }
    match m.state {
        MessageState::Dead => Err(BrokerError::replace_dead(&id)),
        MessageState::Leased => {
            let next = Replacement::successor(request, stored.successor.as_ref(), now);
            let deliver_at = next.deliver_at;
            stored.successor = Some(next);
            stored.record(now, EventKind::Replaced { after_lease: true });
            Ok(EnqueueOutcome::replaced(id, seq, deliver_at, true))
        }
        _ => {
            let next = Replacement::of(request, m.enqueued_at, now);
            next.apply_content(m);
            m.deliver_at = next.deliver_at;
            m.state = waiting_state(m.deliver_at, now);
            stored.record(now, EventKind::Replaced { after_lease: false });
            Ok(EnqueueOutcome::replaced(id, seq, next.deliver_at, false))
        }
    }
}

/// Moves a message to `Dead` at wall time `at`.
pub(crate) fn kill(m: &mut Message, at: u64) {
    m.state = MessageState::Dead;
    m.died_at = Some(at);
    m.lease_until = None;
    m.counters.buries += 1;
}

/// Scheduled or ready, whichever `deliver_at` makes it at `now`.
pub(crate) fn waiting_state(deliver_at: u64, now: u64) -> MessageState {
    if deliver_at <= now {
        MessageState::Ready
    } else {
        MessageState::Scheduled
    }
}

pub(crate) fn not_found(queue: &QueueName, id: &MessageId) -> BrokerError {
    BrokerError::MessageNotFound {
        queue: queue.clone(),
        id: id.clone(),
    }
}

/// The sort key of a message in its state's list order (see `ListQuery`).
pub(crate) fn list_key(m: &Message) -> (u64, u64, u64) {
    match m.state {
        MessageState::Scheduled => (m.deliver_at, m.seq, 0),
        MessageState::Ready => (u64::from(m.priority), m.deliver_at, m.seq),
        MessageState::Leased => (m.lease_until.unwrap_or(0), m.seq, 0),
        MessageState::Dead => (m.died_at.unwrap_or(0), m.seq, 0),
        MessageState::Acked | MessageState::Cancelled => (m.ended_at.unwrap_or(0), m.seq, 0),
    }
}
