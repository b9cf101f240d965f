//! The model's flow control: which ready messages the gate lets out, by
//! brute force. Every count is derived from the messages at the moment it
//! is needed (a slot *is* a leased message), and the only state kept is
//! what time cannot re-derive: the buckets and the cooldowns
//! ([`FlowState`]). The rules themselves are `crate::flow`'s.

use std::collections::BTreeMap;

use crate::error::{BrokerError, BrokerResult};
use crate::events::{DeathReason, DeferReason, EventKind};
use crate::flow::{
    self, Bucket, Deferral, Deferred, FlowConfig, FlowKey, GateState, Hold, KeyInfo,
};
use crate::message::{Message, MessageState};
use crate::model::{MessageId, QueueName};

use super::state::{self, State, Stored};

/// What a queue's flow control remembers between calls.
#[derive(Debug, Default)]
pub(crate) struct FlowState {
    pub bucket: Bucket,
    pub cooling_until: u64,
    /// Keys with a bucket that is not full or a cooldown; the others have
    /// no entry (api.md: memory does not grow with keys that are done).
    pub keys: BTreeMap<FlowKey, KeyFlow>,
}

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct KeyFlow {
    pub bucket: Bucket,
    pub cooling_until: u64,
}

/// The gate's verdict on one ready message.
enum Verdict {
    Deliver,
    Held(Hold),
}

impl State {
    /// The ready messages of the unpaused `queues` that the gate lets out
    /// now, at most `max`, in delivery order, with the tokens they take
    /// already spent; and, when fewer than `max`, the earliest time a held
    /// message's hold ends by time alone.
    pub fn deliverable(
        &mut self,
        queues: &[QueueName],
        max: usize,
        now: u64,
    ) -> (Vec<(QueueName, MessageId)>, Option<u64>) {
        let mut chosen: Vec<(QueueName, MessageId)> = Vec::new();
        let mut wake: Option<u64> = None;
        for key in self.ready_order(queues, now) {
            if chosen.len() == max {
                break;
            }
            match self.verdict(&key, &chosen, now) {
                Verdict::Deliver => {
                    self.spend(&key, now);
                    chosen.push(key);
                }
                Verdict::Held(hold) => {
                    if let Some(until) = hold.until() {
                        wake = Some(wake.map_or(until, |w| w.min(until)));
                    }
                }
            }
        }
        (chosen, wake)
    }

    fn verdict(
        &self,
        key: &(QueueName, MessageId),
        chosen: &[(QueueName, MessageId)],
        now: u64,
    ) -> Verdict {
        let (Some(queue), Some(stored)) = (self.queues.get(&key.0), self.messages.get(key)) else {
            return Verdict::Held(Hold::Ordered);
        };
        let Some(flow) = &queue.config.flow else {
            return Verdict::Deliver;
        };
        let taken = |k: Option<&FlowKey>| {
            chosen
                .iter()
                .filter(|c| c.0 == key.0)
                .filter(|c| {
                    k.is_none() || self.messages.get(c).and_then(|s| s.msg.key.as_ref()) == k
                })
                .count() as u32
        };
        let queue_gate = GateState {
            bucket: queue.flow.bucket,
            leased: self.leased_count(&key.0, None) + taken(None),
            cooling_until: queue.flow.cooling_until,
        };
        if let Err(hold) = flow.admit_queue(&queue_gate, now) {
            return Verdict::Held(hold);
        }
        let Some(flow_key) = &stored.msg.key else {
            return Verdict::Deliver;
        };
        if flow.ordered && !self.is_keys_next(&key.0, &stored.msg) {
            return Verdict::Held(Hold::Ordered);
        }
        let kept = queue.flow.keys.get(flow_key).copied().unwrap_or_default();
        let key_gate = GateState {
            bucket: kept.bucket,
            leased: self.leased_count(&key.0, Some(flow_key)) + taken(Some(flow_key)),
            cooling_until: kept.cooling_until,
        };
        match flow.admit_key(&key_gate, now) {
            Ok(()) => Verdict::Deliver,
            Err(hold) => Verdict::Held(hold),
        }
    }

    /// Spends the tokens of the delivery of `key` (admitted).
    fn spend(&mut self, key: &(QueueName, MessageId), now: u64) {
        let flow_key = self.messages.get(key).and_then(|s| s.msg.key.clone());
        let Some(queue) = self.queues.get_mut(&key.0) else {
            return;
        };
        let Some(flow) = queue.config.flow.clone() else {
            return;
        };
        let mut queue_gate = GateState {
            bucket: queue.flow.bucket,
            ..GateState::default()
        };
        match flow_key {
            Some(flow_key) => {
                let entry = queue.flow.keys.entry(flow_key).or_default();
                let mut key_gate = GateState {
                    bucket: entry.bucket,
                    ..GateState::default()
                };
                flow.take(&mut queue_gate, Some(&mut key_gate), now);
                entry.bucket = key_gate.bucket;
            }
            None => flow.take(&mut queue_gate, None, now),
        }
        queue.flow.bucket = queue_gate.bucket;
    }

    /// Leased messages of `queue` (of one key when `key` is given).
    fn leased_count(&self, queue: &QueueName, key: Option<&FlowKey>) -> u32 {
        self.in_queue(queue)
            .filter(|s| s.msg.state == MessageState::Leased)
            .filter(|s| key.is_none() || s.msg.key.as_ref() == key)
            .count() as u32
    }

    /// With `ordered`: whether `msg` is its key's next message
    /// ([`flow::keys_next`]).
    fn is_keys_next(&self, queue: &QueueName, msg: &Message) -> bool {
        let same_key: Vec<&Message> = self
            .in_queue(queue)
            .map(|s| &s.msg)
            .filter(|m| m.key == msg.key && m.state != MessageState::Dead)
            .collect();
        let in_order = |m: &&Message| (m.priority, m.deliver_at, m.seq);
        let holder = same_key
            .iter()
            .copied()
            .filter(|m| m.holds_key())
            .min_by_key(in_order);
        let next = flow::keys_next(true, holder, || {
            same_key
                .iter()
                .copied()
                .filter(|m| m.state == MessageState::Ready)
                .min_by_key(in_order)
        });
        next.is_some_and(|m| m.id == msg.id)
    }

    /// A nack with `defer: true` at `now` of the leased message `key`: the
    /// deferral rule of `crate::flow`. The lease is checked by the caller.
    pub fn defer(
        &mut self,
        key: &(QueueName, MessageId),
        delay_ms: Option<u64>,
        reason: DeferReason,
        now: u64,
    ) -> BrokerResult<()> {
        let config = self.config(&key.0)?;
        let Some(flow) = config.flow.clone() else {
            return Err(no_flow(&key.0));
        };
        let stored = self.stored_mut(&key.0, &key.1)?;
        let (deferred, flow_key) =
            defer_message(stored, &flow, &config.retry, delay_ms, reason, now);
        if let Some(until) = deferred.cools_until() {
            let Some(queue) = self.queues.get_mut(&key.0) else {
                return Ok(());
            };
            let cooling = match flow_key {
                Some(flow_key) => &mut queue.flow.keys.entry(flow_key).or_default().cooling_until,
                None => &mut queue.flow.cooling_until,
            };
            *cooling = (*cooling).max(until);
        }
        Ok(())
    }

    /// Forgets the flow state of keys that are done at `now`: no live
    /// message, no cooldown, a full bucket.
    pub fn forget_idle_keys(&mut self, now: u64) {
        let names: Vec<QueueName> = self.queues.keys().cloned().collect();
        for name in names {
            let live: std::collections::BTreeSet<FlowKey> = self
                .in_queue(&name)
                .filter_map(|s| s.msg.key.clone())
                .collect();
            if let Some(queue) = self.queues.get_mut(&name) {
                queue.flow.keys.retain(|k, kept| {
                    live.contains(k) || kept.cooling_until > now || !kept.bucket.is_full(now)
                });
            }
        }
    }

    /// The keys whose state the model keeps (live messages, a cooldown or
    /// a bucket not yet full), and of those the ones cooling down.
    pub fn key_counts(&self, queue: &QueueName, now: u64) -> (u64, u64) {
        let Some(q) = self.queues.get(queue) else {
            return (0, 0);
        };
        let mut keys: std::collections::BTreeSet<&FlowKey> = self
            .in_queue(queue)
            .filter_map(|s| s.msg.key.as_ref())
            .collect();
        keys.extend(q.flow.keys.keys());
        let cooling = q
            .flow
            .keys
            .values()
            .filter(|k| k.cooling_until > now)
            .count();
        (keys.len() as u64, cooling as u64)
    }

    /// `GET /v1/queues/{queue}/keys/{key}`.
    pub fn key_info(&self, queue: &QueueName, key: &FlowKey, now: u64) -> BrokerResult<KeyInfo> {
        let q = self
            .queues
            .get(queue)
            .ok_or_else(|| BrokerError::QueueNotFound(queue.clone()))?;
        let mut info = KeyInfo::empty(key.clone());
        for stored in self
            .in_queue(queue)
            .filter(|s| s.msg.key.as_ref() == Some(key))
        {
            match stored.msg.state {
                MessageState::Scheduled => info.scheduled += 1,
                MessageState::Ready => info.ready += 1,
                MessageState::Leased => info.leased += 1,
                MessageState::Dead => info.dead += 1,
                MessageState::Acked | MessageState::Cancelled => {}
            }
        }
        info.cooling_until = q
            .flow
            .keys
            .get(key)
            .map(|k| k.cooling_until)
            .filter(|&until| until > now);
        Ok(info)
    }

    /// The earliest future time a flow state is forgotten or a cooldown
    /// ends in `queues` (waiting lease calls look again then).
    pub fn flow_events(&self, queues: &[QueueName], now: u64) -> Option<u64> {
        queues
            .iter()
            .filter_map(|q| self.queues.get(q))
            .flat_map(|q| {
                let keys = q.flow.keys.values().map(|k| k.cooling_until);
                std::iter::once(q.flow.cooling_until).chain(keys)
            })
            .filter(|&t| t > now)
            .min()
    }
}

/// Applies a deferral ([`FlowConfig::deferred`]) to a leased message: it
/// dies or is scheduled again. Returns the deferral and the message's key.
fn defer_message(
    stored: &mut Stored,
    flow: &FlowConfig,
    retry: &crate::model::RetryPolicy,
    delay_ms: Option<u64>,
    reason: DeferReason,
    now: u64,
) -> (Deferred, Option<FlowKey>) {
    stored.lease = None;
    let m = &mut stored.msg;
    let deferred = flow.deferred(retry, m.attempts, m.deferrals, delay_ms, now);
    m.lease_until = None;
    m.attempts = deferred.attempts;
    m.deferrals = deferred.deferrals;
    let kind = match deferred.verdict {
        Deferral::Dead => {
            state::kill(m, now);
            EventKind::Dead {
                reason: DeathReason::MaxDeferrals,
            }
        }
        Deferral::Again { deliver_at } => {
            m.deliver_at = deliver_at;
            m.state = state::waiting_state(deliver_at, now);
            EventKind::Deferred {
                until: deliver_at,
                reason,
            }
        }
    };
    // The cooldown is the deferred key's, whatever a successor brings.
    let key = m.key.clone();
    stored.record(now, kind);
    state::take_successor(stored, now);
    (deferred, key)
}

/// `defer: true` on a queue without `flow` (api.md: 400).
pub(crate) fn no_flow(queue: &QueueName) -> BrokerError {
    BrokerError::defer_without_flow(queue)
}
