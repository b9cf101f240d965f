//! Flow control: the one gate that decides whether a ready message may be
//! delivered now (api.md, "Flow control").
//!
//! Every delivery path (HTTP lease, beanstalkd `reserve`, push) meets this
//! gate. The model and `LocalBroker` call this module; `RedisBroker` runs
//! the bucket arithmetic, the admission rule, the idle rule and the
//! ordered rule as Lua ports inside its atomic calls (docs/redis.md, "Lua
//! ports", lists each with the test that keeps it equal to the code here).
//! Nothing here reads a clock: `now` is passed in.
//!
//! # The rules, as code
//! - [`Bucket`]: a token bucket as a GCRA "theoretical arrival time". One
//!   `u64` of state; a full bucket needs none (see [`Bucket::is_full`]).
//! - [`FlowConfig::admit`]: the admission rule. Given the queue's and the
//!   key's gates (their buckets, their leased counts, their cooldowns), a
//!   message may start a delivery now, or is held with a [`Hold`] that
//!   says why and, when time alone ends it, until when.
//! - [`FlowConfig::take`]: what a delivery that was admitted spends.
//! - [`FlowConfig::deferred`]: everything a deferral (push 429/503 with
//!   `Retry-After`, nack `defer`) changes: the attempt given back, the
//!   deferral counted, death or the new due time ([`FlowConfig::defer`]),
//!   and the cooldown ([`Deferred::cools_until`]). Every backend applies it
//!   as returned (Redis passes it into `defer.lua`).
//! - [`keys_next`]: the ordered rule, which of a key's messages goes next.
//!
//! A slot is a lease: the leased counts a backend passes in are derived
//! from its leases (never a counter of their own that could leak), so
//! whatever ends a lease frees its slot.
//!
//! # Bucket arithmetic
//! A bucket of `burst` tokens gains one token every `period_ms / limit` ms.
//! The emission interval `T` is kept in microseconds, rounded up, so the
//! bucket never runs faster than its limit: over any span of `d` ms at most
//! `burst + floor(d * limit / period_ms)` deliveries start. The state is
//! the theoretical arrival time `tat` (µs since the epoch): a delivery at
//! `now` is allowed when `tat - (burst - 1) * T <= now`, and moves `tat` to
//! `max(tat, now) + T`. The bucket is full again once `tat <= now`.

use serde::{Deserialize, Serialize};

use crate::error::BrokerError;
use crate::model::RetryPolicy;

/// The longest flow key, in bytes (api.md).
pub const FLOW_KEY_MAX_LEN: usize = 256;
/// Largest `limit` of a rate (api.md).
pub const MAX_RATE_LIMIT: u32 = 1_000_000;
/// Longest `period_ms` of a rate: one day (api.md).
pub const MAX_RATE_PERIOD_MS: u64 = 86_400_000;
/// Largest `max_deferrals` (api.md).
pub const MAX_DEFERRALS_LIMIT: u32 = 10_000;

/// A message's flow key: 1 to 256 bytes of UTF-8 without control
/// characters.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct FlowKey(String);

impl FlowKey {
    pub fn new(key: impl Into<String>) -> Result<Self, BrokerError> {
        let key = key.into();
        if key.is_empty() || key.len() > FLOW_KEY_MAX_LEN {
            return Err(BrokerError::InvalidArgument(format!(
                "key must be 1 to {FLOW_KEY_MAX_LEN} bytes, got {}",
                key.len()
            )));
        }
        if key.chars().any(char::is_control) {
            return Err(BrokerError::InvalidArgument(
                "key must not contain control characters".into(),
            ));
        }
        Ok(Self(key))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for FlowKey {
    type Error = BrokerError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<FlowKey> for String {
    fn from(value: FlowKey) -> Self {
        value.0
    }
}

impl std::fmt::Display for FlowKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `limit` deliveries per `period_ms`, with up to `burst` at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rate {
    pub limit: u32,
    pub period_ms: u64,
    pub burst: u32,
}

impl Rate {
    /// A rate's `burst` when a `PUT` leaves it out (api.md):
    /// `max(2, ceil(limit / period_ms) + 1)`, so that a token not taken the
    /// instant it arrives is not lost to the delivery's own hand-off time
    /// and the rate delivers its `limit` over long spans.
    pub fn default_burst(limit: u32, period_ms: u64) -> u32 {
        let per_ms = u64::from(limit).div_ceil(period_ms.max(1));
        u32::try_from(per_ms.saturating_add(1))
            .unwrap_or(u32::MAX)
            .max(2)
    }

    /// The emission interval in µs, rounded up (never faster than the
    /// limit), at least 1.
    pub fn interval_us(&self) -> u64 {
        let period_us = u128::from(self.period_ms) * 1_000;
        let limit = u128::from(self.limit.max(1));
        (period_us.div_ceil(limit) as u64).max(1)
    }

    fn validate(&self, field: &str) -> Result<(), BrokerError> {
        if self.limit == 0 || self.limit > MAX_RATE_LIMIT {
            return Err(invalid(format!(
                "flow.{field}.limit must be within 1..={MAX_RATE_LIMIT}, got {}",
                self.limit
            )));
        }
        if self.period_ms == 0 || self.period_ms > MAX_RATE_PERIOD_MS {
            return Err(invalid(format!(
                "flow.{field}.period_ms must be within 1..={MAX_RATE_PERIOD_MS}, got {}",
                self.period_ms
            )));
        }
        if self.burst == 0 {
            return Err(invalid(format!("flow.{field}.burst must be at least 1")));
        }
        Ok(())
    }
}

fn invalid(message: String) -> BrokerError {
    BrokerError::InvalidArgument(message)
}

/// A queue's flow limits (api.md's `flow` object, defaults filled in).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowConfig {
    pub rate: Option<Rate>,
    pub key_rate: Option<Rate>,
    pub concurrency: Option<u32>,
    pub key_concurrency: Option<u32>,
    pub ordered: bool,
    pub max_deferrals: u32,
}

impl Default for FlowConfig {
    fn default() -> Self {
        Self {
            rate: None,
            key_rate: None,
            concurrency: None,
            key_concurrency: None,
            ordered: false,
            max_deferrals: Self::DEFAULT_MAX_DEFERRALS,
        }
    }
}

/// Why a ready message is held back (the `reason` label of
/// `delayd_flow_held_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hold {
    /// No rate token (queue or key) until the given wall time (ms).
    Rate(u64),
    /// Every concurrency slot (queue or key) is taken: a lease must end.
    Concurrency,
    /// An ordered key's message that is not the key's next one, or whose
    /// key's next message is not ready: that message must be delivered and
    /// finished first.
    Ordered,
    /// The queue or key cools down after a deferral until the given wall
    /// time (ms).
    Cooldown(u64),
}

impl Hold {
    /// The label of `delayd_flow_held_total{reason}`.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Rate(_) => "rate",
            Self::Concurrency => "concurrency",
            Self::Ordered => "ordered",
            Self::Cooldown(_) => "cooldown",
        }
    }

    /// When time alone ends the hold (`None`: a lease must end first).
    pub fn until(self) -> Option<u64> {
        match self {
            Self::Rate(t) | Self::Cooldown(t) => Some(t),
            Self::Concurrency | Self::Ordered => None,
        }
    }
}

/// A token bucket's state: the theoretical arrival time in µs since the
/// epoch (0, or any time at or before now: full).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Bucket {
    pub tat_us: u64,
}

fn us(ms: u64) -> u64 {
    ms.saturating_mul(1_000)
}

impl Bucket {
    /// A bucket with no token at `now` (ms): the next one comes after one
    /// interval. Backends that do not persist a bucket start it so after a
    /// restart, so a restart never grants a burst beyond `burst`.
    pub fn empty(rate: &Rate, now: u64) -> Self {
        let burst = u64::from(rate.burst.max(1));
        Self {
            tat_us: us(now).saturating_add(burst.saturating_mul(rate.interval_us())),
        }
    }

    /// The first wall time (ms) at or after `now` at which a token is
    /// there.
    pub fn ready_at(&self, rate: &Rate, now: u64) -> u64 {
        let slack = u64::from(rate.burst.max(1) - 1).saturating_mul(rate.interval_us());
        let at_us = self.tat_us.saturating_sub(slack);
        at_us.div_ceil(1_000).max(now)
    }

    /// Whether a token is there at `now` (ms).
    pub fn has_token(&self, rate: &Rate, now: u64) -> bool {
        self.ready_at(rate, now) <= now
    }

    /// Spends a token at `now` (the caller checked [`has_token`]).
    ///
    /// [`has_token`]: Self::has_token
    pub fn take(&mut self, rate: &Rate, now: u64) {
        debug_assert!(
            self.has_token(rate, now),
            "token taken from an empty bucket: {self:?} {rate:?} at {now}"
        );
        self.tat_us = self.tat_us.max(us(now)).saturating_add(rate.interval_us());
    }

    /// Whether the bucket is full at `now`: its state may be forgotten.
    pub fn is_full(&self, now: u64) -> bool {
        self.tat_us <= us(now)
    }

    /// When the bucket is full again (ms).
    pub fn full_at(&self) -> u64 {
        self.tat_us.div_ceil(1_000)
    }
}

/// The flow state of a queue or of a key, as the gate needs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateState {
    /// Its rate bucket (ignored when the matching rate is not set).
    pub bucket: Bucket,
    /// Messages leased now (a slot is a lease: derived from the leases).
    pub leased: u32,
    /// Nothing is delivered before this wall time (ms; 0: not cooling).
    pub cooling_until: u64,
}

impl GateState {
    /// Whether this state holds nothing a fresh one would not: no lease,
    /// no cooldown, a full bucket. A backend forgets such a key.
    pub fn is_idle(&self, now: u64) -> bool {
        self.leased == 0 && self.cooling_until <= now && self.bucket.is_full(now)
    }

    /// When an idle-but-for-time state becomes forgettable (ms).
    pub fn idle_at(&self) -> u64 {
        self.cooling_until.max(self.bucket.full_at())
    }
}

/// A key's live messages by state, and its cooldown
/// (`GET /v1/queues/{queue}/keys/{key}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyInfo {
    pub key: FlowKey,
    pub scheduled: u64,
    pub ready: u64,
    pub leased: u64,
    pub dead: u64,
    /// Until when the key cools down (`None`: it does not).
    pub cooling_until: Option<u64>,
}

impl KeyInfo {
    /// A key with no live message and no cooldown (what a key that is not
    /// known answers).
    pub fn empty(key: FlowKey) -> Self {
        Self {
            key,
            scheduled: 0,
            ready: 0,
            leased: 0,
            dead: 0,
            cooling_until: None,
        }
    }
}

/// What the deferral rule decides for a deferred delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deferral {
    /// Deferred more than `max_deferrals` times in a row: the message dies.
    Dead,
    /// Due again at `deliver_at`; its key (or queue, without a key) cools
    /// down until then.
    Again { deliver_at: u64 },
}

impl FlowConfig {
    pub const DEFAULT_MAX_DEFERRALS: u32 = 100;

    /// The argument rules of api.md, each naming its field.
    pub fn validate(&self) -> Result<(), BrokerError> {
        if let Some(rate) = &self.rate {
            rate.validate("rate")?;
        }
        if let Some(rate) = &self.key_rate {
            rate.validate("key_rate")?;
        }
        if self.concurrency == Some(0) {
            return Err(invalid("flow.concurrency must be at least 1".into()));
        }
        if self.key_concurrency == Some(0) {
            return Err(invalid("flow.key_concurrency must be at least 1".into()));
        }
        if self.ordered && self.key_concurrency.is_some_and(|c| c != 1) {
            return Err(invalid(
                "flow.key_concurrency must be 1 (or absent) with flow.ordered: true".into(),
            ));
        }
        if self.max_deferrals > MAX_DEFERRALS_LIMIT {
            return Err(invalid(format!(
                "flow.max_deferrals must be at most {MAX_DEFERRALS_LIMIT}, got {}",
                self.max_deferrals
            )));
        }
        Ok(())
    }

    /// Slots per key: `key_concurrency`, 1 with `ordered`.
    pub fn key_slots(&self) -> Option<u32> {
        if self.ordered {
            Some(1)
        } else {
            self.key_concurrency
        }
    }

    /// Whether keys have limits of their own (else a key is only a label,
    /// and only cooldown after a deferral holds it).
    pub fn limits_keys(&self) -> bool {
        self.key_rate.is_some() || self.key_slots().is_some()
    }

    /// Whether the queue as a whole may start a delivery now.
    pub fn admit_queue(&self, queue: &GateState, now: u64) -> Result<(), Hold> {
        admit_one(self.rate.as_ref(), self.concurrency, queue, now)
    }

    /// Whether a key may start a delivery now. The caller decides the
    /// ordered rule (whether the message is its key's next one).
    pub fn admit_key(&self, key: &GateState, now: u64) -> Result<(), Hold> {
        admit_one(self.key_rate.as_ref(), self.key_slots(), key, now)
    }

    /// The admission rule: the queue and (when the message has one) its
    /// key each have a token, a free slot and no cooldown. Queue first, so
    /// a hold says the queue's reason when both hold.
    pub fn admit(&self, queue: &GateState, key: Option<&GateState>, now: u64) -> Result<(), Hold> {
        self.admit_queue(queue, now)?;
        match key {
            Some(key) => self.admit_key(key, now),
            None => Ok(()),
        }
    }

    /// Spends what an admitted delivery takes: a token of each bucket that
    /// has a rate. (The slot it takes is its lease: the backend's leased
    /// counts are derived from its leases, so nothing is counted here.)
    pub fn take(&self, queue: &mut GateState, key: Option<&mut GateState>, now: u64) {
        take_one(self.rate.as_ref(), queue, now);
        if let Some(key) = key {
            take_one(self.key_rate.as_ref(), key, now);
        }
    }

    /// A delivery deferred at `now`, of a message with `attempts` (this
    /// delivery's included) and `deferrals` in a row before it: the attempt
    /// is given back, the deferral counted, and [`defer`](Self::defer)
    /// decides the rest.
    pub fn deferred(
        &self,
        retry: &RetryPolicy,
        attempts: u32,
        deferrals: u32,
        delay_ms: Option<u64>,
        now: u64,
    ) -> Deferred {
        let deferrals = deferrals.saturating_add(1);
        Deferred {
            attempts: attempts.saturating_sub(1),
            deferrals,
            verdict: self.defer(retry, deferrals, delay_ms, now),
        }
    }

    /// The deferral rule. `deferrals` counts this message's deferrals in a
    /// row including this one; `delay_ms` is the delay the consumer asked
    /// for (nack `delay_ms`, or a push's `Retry-After` already passed
    /// through [`retry_after_ms`]). Without one the queue's retry backoff
    /// for the `deferrals`th deferral applies.
    pub fn defer(
        &self,
        retry: &RetryPolicy,
        deferrals: u32,
        delay_ms: Option<u64>,
        now: u64,
    ) -> Deferral {
        if deferrals > self.max_deferrals {
            return Deferral::Dead;
        }
        let delay = delay_ms.unwrap_or_else(|| retry.delay(deferrals));
        Deferral::Again {
            deliver_at: now.saturating_add(delay),
        }
    }
}

/// Everything a deferred delivery changes (api.md, Flow control ›
/// Deferrals), decided here once for every backend: each applies it to its
/// record as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deferred {
    /// The message's attempts after it: the delivery's attempt given back.
    pub attempts: u32,
    /// Its deferrals in a row, this one included.
    pub deferrals: u32,
    /// It dies, or is due again.
    pub verdict: Deferral,
}

impl Deferred {
    /// Until when the message's key (without a key: its queue) cools down:
    /// its new due time; nothing when it dies.
    pub fn cools_until(&self) -> Option<u64> {
        match self.verdict {
            Deferral::Dead => None,
            Deferral::Again { deliver_at } => Some(deliver_at),
        }
    }
}

/// The ordered rule (api.md, Flow control): an ordered key's next message
/// is its holder (a message of the key delivered before and not yet done
/// with, [`Message::holds_key`](crate::Message::holds_key)) whatever its
/// state, else the key's first ready message in delivery order. So while a
/// holder waits (scheduled for its retry), the key delivers nothing. The
/// backends find the holder and the first ready message their own way; this
/// says which of them goes. Without `ordered` there is no holder:
/// delivery order alone decides.
pub fn keys_next<T>(
    ordered: bool,
    holder: Option<T>,
    first_ready: impl FnOnce() -> Option<T>,
) -> Option<T> {
    match holder {
        Some(holder) if ordered => Some(holder),
        _ => first_ready(),
    }
}

/// A push's `Retry-After` (ms) as the deferral's delay: capped at the
/// queue's `retry.max_ms` (api.md).
pub fn retry_after_ms(retry: &RetryPolicy, retry_after_ms: u64) -> u64 {
    retry_after_ms.min(retry.max_ms)
}

fn admit_one(
    rate: Option<&Rate>,
    slots: Option<u32>,
    state: &GateState,
    now: u64,
) -> Result<(), Hold> {
    if state.cooling_until > now {
        return Err(Hold::Cooldown(state.cooling_until));
    }
    if slots.is_some_and(|slots| state.leased >= slots) {
        return Err(Hold::Concurrency);
    }
    if let Some(rate) = rate {
        let at = state.bucket.ready_at(rate, now);
        if at > now {
            return Err(Hold::Rate(at));
        }
    }
    Ok(())
}

fn take_one(rate: Option<&Rate>, state: &mut GateState, now: u64) {
    if let Some(rate) = rate {
        state.bucket.take(rate, now);
    }
}

#[cfg(test)]
#[path = "flow_tests.rs"]
mod tests;
