//! Messages, their states, and the request/response types of the `Broker`
//! trait. These are core types, not wire types: frontends convert.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::flow::FlowKey;
use crate::model::{LeaseId, MessageId, QueueName};

/// Where a live message is in its lifecycle (see docs/ARCHITECTURE.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageState {
    /// Waiting for `deliver_at`.
    Scheduled,
    /// Due, waiting for a consumer.
    Ready,
    /// Handed to a consumer until `lease_until`.
    Leased,
    /// Out of attempts (or buried); waits for a redrive or cancel.
    Dead,
    /// Ended by an ack (or a push answered 2xx) and kept, without its
    /// payload, for its queue's `retain_ms` (api.md, "Retention").
    Acked,
    /// Ended by a cancel and kept like an acked one.
    Cancelled,
}

impl MessageState {
    /// Every live state, in lifecycle order (the states `stats` counts and
    /// `list` pages; a retained message is in neither).
    pub const ALL: [MessageState; 4] = [Self::Scheduled, Self::Ready, Self::Leased, Self::Dead];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Ready => "ready",
            Self::Leased => "leased",
            Self::Dead => "dead",
            Self::Acked => "acked",
            Self::Cancelled => "cancelled",
        }
    }

    /// Whether the message has ended and is only retained.
    pub fn ended(self) -> bool {
        matches!(self, Self::Acked | Self::Cancelled)
    }
}

impl fmt::Display for MessageState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Per-message event counts (beanstalkd's `stats-job` shows them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageCounters {
    /// Leases that expired.
    pub timeouts: u32,
    /// Nacks (beanstalkd `release`).
    pub releases: u32,
    /// Moves to `dead` (beanstalkd `bury`, or attempts exhausted).
    pub buries: u32,
    /// Redrives out of `dead` (beanstalkd `kick`).
    pub kicks: u32,
}

/// A live message, whole.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub queue: QueueName,
    pub id: MessageId,
    /// Unique and increasing per server (or cluster), across restarts.
    pub seq: u64,
    pub state: MessageState,
    /// Wall-clock epoch ms at which it becomes (or became) deliverable.
    pub deliver_at: u64,
    pub enqueued_at: u64,
    pub priority: u32,
    /// Deliveries handed out so far.
    pub attempts: u32,
    /// Overrides the queue's `max_attempts` when set.
    pub max_attempts: Option<u32>,
    /// Default lease length for this message (beanstalkd's per-job TTR);
    /// the queue's `lease_ms` when `None`.
    pub lease_ms: Option<u64>,
    /// Set while `Leased`.
    pub lease_until: Option<u64>,
    /// Set while `Dead`: when it died (dead letters list oldest death first).
    pub died_at: Option<u64>,
    pub counters: MessageCounters,
    pub headers: BTreeMap<String, String>,
    pub payload: Vec<u8>,
    /// Its flow key (api.md, "Flow control"); `None`: limited by the
    /// queue-wide limits only.
    pub key: Option<FlowKey>,
    /// Deferrals in a row (reset by a failed attempt and by redrive); past
    /// the queue's `flow.max_deferrals` the message dies.
    pub deferrals: u32,
    /// The text of the last failure recorded: a nack's `error`, or what a
    /// failed push answered. A failure without a text (a nack without
    /// `error`, an expired lease) leaves it as it was.
    pub last_error: Option<String>,
    /// When it ended (acked or cancelled): set only on a retained message.
    pub ended_at: Option<u64>,
}

impl Message {
    /// Whether the message was handed out before and came back (failed or
    /// deferred): with `flow.ordered` it is its key's next message
    /// whatever its order, until it is acked, cancelled or dead.
    pub fn holds_key(&self) -> bool {
        self.key.is_some()
            && self.state != MessageState::Dead
            && (self.attempts > 0 || self.deferrals > 0)
    }
}

/// When a message becomes deliverable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Schedule {
    #[default]
    Now,
    /// Milliseconds from the broker's "now".
    Delay(u64),
    /// Wall-clock epoch ms; in the past means now (but `deliver_at` keeps
    /// the given value).
    At(u64),
}

impl Schedule {
    /// The `deliver_at` this schedule gives at wall time `now_ms`.
    pub fn deliver_at(self, now_ms: u64) -> u64 {
        match self {
            Self::Now => now_ms,
            Self::Delay(ms) => now_ms.saturating_add(ms),
            Self::At(at) => at,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct EnqueueRequest {
    /// Idempotency key; generated when `None`.
    pub id: Option<MessageId>,
    pub schedule: Schedule,
    /// `None`: [`crate::DEFAULT_PRIORITY`].
    pub priority: Option<u32>,
    pub headers: BTreeMap<String, String>,
    pub payload: Vec<u8>,
    pub max_attempts: Option<u32>,
    pub lease_ms: Option<u64>,
    /// The message's flow key.
    pub key: Option<FlowKey>,
    /// What happens when `id` names a message that lives in the queue.
    pub on_conflict: OnConflict,
    /// With [`OnConflict::Debounce`]: the due time is capped at the
    /// message's `enqueued_at` plus this.
    pub debounce_max_ms: Option<u64>,
}

/// What an enqueue does when its id names a live message (api.md,
/// "Retention, replace and debounce").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OnConflict {
    /// Nothing changes: a duplicate.
    #[default]
    Keep,
    /// A waiting message takes the request's content and due time; a
    /// leased one gets the request as its successor.
    Replace,
    /// As `Replace`, with the due time capped at `enqueued_at +
    /// debounce_max_ms`.
    Debounce,
}

impl OnConflict {
    pub const ALL: [OnConflict; 3] = [Self::Keep, Self::Replace, Self::Debounce];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Keep => "keep",
            Self::Replace => "replace",
            Self::Debounce => "debounce",
        }
    }

    /// Whether it changes a live message (replace or debounce).
    pub fn replaces(self) -> bool {
        self != Self::Keep
    }
}

impl std::fmt::Display for OnConflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for OnConflict {
    type Err = crate::BrokerError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| {
                crate::BrokerError::InvalidArgument(format!(
                    "on_conflict must be keep, replace or debounce, not {s:?}"
                ))
            })
    }
}

/// The content and due time a replace or debounce gives a message: what
/// a waiting message takes at once, and what a leased one keeps as its
/// successor until its lease ends. (Its serde derives shape the embedded
/// store's successor records, pinned by its golden tests.)
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replacement {
    pub payload: Vec<u8>,
    pub headers: BTreeMap<String, String>,
    pub priority: u32,
    pub key: Option<FlowKey>,
    pub max_attempts: Option<u32>,
    pub lease_ms: Option<u64>,
    /// The due time (debounce's cap applied).
    pub deliver_at: u64,
    /// When the first request of a successor came: debounce caps a later
    /// one's due time at this plus its `debounce_max_ms`.
    pub since: u64,
}

impl Replacement {
    /// What `request` (replace or debounce) gives a message enqueued at
    /// `enqueued_at`, at wall time `now`: its content, and its due time
    /// capped by debounce at `enqueued_at + debounce_max_ms`.
    pub fn of(request: &EnqueueRequest, enqueued_at: u64, now: u64) -> Self {
        let deliver_at = request.due_from(enqueued_at, now);
        Self {
            payload: request.payload.clone(),
            headers: request.headers.clone(),
            priority: request.priority.unwrap_or(crate::DEFAULT_PRIORITY),
            key: request.key.clone(),
            max_attempts: request.max_attempts,
            lease_ms: request.lease_ms,
            deliver_at,
            since: enqueued_at,
        }
    }

    /// A successor for a leased message, asked for at `now`: debounce's
    /// cap runs from the first request of the successor (`previous`'s
    /// `since`), or from now for the first.
    pub fn successor(request: &EnqueueRequest, previous: Option<&Replacement>, now: u64) -> Self {
        let since = previous.map_or(now, |p| p.since);
        Self::of(request, since, now)
    }

    /// The enqueue a successor becomes after its message's ack: a new
    /// message with the id `id`, due at the successor's due time.
    pub fn into_request(self, id: MessageId) -> EnqueueRequest {
        EnqueueRequest {
            id: Some(id),
            schedule: Schedule::At(self.deliver_at),
            priority: Some(self.priority),
            headers: self.headers,
            payload: self.payload,
            max_attempts: self.max_attempts,
            lease_ms: self.lease_ms,
            key: self.key,
            ..EnqueueRequest::default()
        }
    }

    /// Puts the content (not the due time) on `message`.
    pub fn apply_content(&self, message: &mut Message) {
        message.payload = self.payload.clone();
        message.headers = self.headers.clone();
        message.priority = self.priority;
        message.key = self.key.clone();
        message.max_attempts = self.max_attempts;
        message.lease_ms = self.lease_ms;
    }
}

impl EnqueueRequest {
    /// The due time of a message this request creates at `now`: its
    /// schedule's, capped by debounce at `now + debounce_max_ms` (the cap
    /// counts from the message's `enqueued_at`, which is now).
    pub fn deliver_at(&self, now: u64) -> u64 {
        self.due_from(now, now)
    }

    /// Its schedule's due time at `now`, capped by debounce at
    /// `enqueued_at + debounce_max_ms` (a message enqueued then).
    fn due_from(&self, enqueued_at: u64, now: u64) -> u64 {
        let due = self.schedule.deliver_at(now);
        match (self.on_conflict, self.debounce_max_ms) {
            (OnConflict::Debounce, Some(max)) => due.min(enqueued_at.saturating_add(max)),
            _ => due,
        }
    }

    /// The argument rules of one enqueue item, in every broker (an invalid
    /// item fails alone, the others of its batch go on): a message asking
    /// for zero deliveries or a zero-length lease is a mistake. (A queue's
    /// `max_attempts` 0 means "never dead-letter"; a message's may not.)
    pub fn validate(&self) -> Result<(), crate::BrokerError> {
        if self.max_attempts == Some(0) {
            return Err(crate::BrokerError::InvalidArgument(
                "max_attempts must be at least 1".into(),
            ));
        }
        if self.debounce_max_ms.is_some() && self.on_conflict != OnConflict::Debounce {
            return Err(crate::BrokerError::InvalidArgument(
                "debounce_max_ms needs on_conflict debounce".into(),
            ));
        }
        if self.on_conflict.replaces() && self.id.is_none() {
            return Err(crate::BrokerError::InvalidArgument(format!(
                "on_conflict {} needs an id",
                self.on_conflict
            )));
        }
        check_lease_ms(self.lease_ms)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EnqueueOptions {
    /// Create the queue with defaults when it does not exist (api.md's
    /// default; `--no-auto-create` turns it off).
    pub auto_create: bool,
}

impl Default for EnqueueOptions {
    fn default() -> Self {
        Self { auto_create: true }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnqueueOutcome {
    pub id: MessageId,
    pub seq: u64,
    pub deliver_at: u64,
    /// False when a live message with this id already existed: nothing
    /// changed (unless `replaced`), and the fields describe the existing
    /// message.
    pub created: bool,
    /// The existing message took the request's content and due time, or
    /// (`after_lease`) keeps it as its successor.
    pub replaced: bool,
    /// The existing message is leased: the request is its successor,
    /// applied when the lease ends; `deliver_at` is the successor's.
    pub after_lease: bool,
}

impl EnqueueOutcome {
    /// A new message.
    pub fn created(id: MessageId, seq: u64, deliver_at: u64) -> Self {
        Self {
            id,
            seq,
            deliver_at,
            created: true,
            replaced: false,
            after_lease: false,
        }
    }

    /// A duplicate: `keep` found the id taken.
    pub fn duplicate(id: MessageId, seq: u64, deliver_at: u64) -> Self {
        Self {
            created: false,
            ..Self::created(id, seq, deliver_at)
        }
    }

    /// A replace or debounce of the live message `seq`.
    pub fn replaced(id: MessageId, seq: u64, deliver_at: u64, after_lease: bool) -> Self {
        Self {
            created: false,
            replaced: true,
            after_lease,
            ..Self::created(id, seq, deliver_at)
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRequest {
    /// At most this many messages (1..=1000).
    pub max: u32,
    /// Wait up to this long for the first message (0 = answer at once).
    pub wait_ms: u64,
    /// Lease length; the message's, else the queue's, when `None`.
    pub lease_ms: Option<u64>,
}

impl LeaseRequest {
    /// The argument rules of every lease, in every broker: `max` within
    /// 1..=[`MAX_BATCH`](crate::MAX_BATCH), and no zero-length lease.
    pub fn validate(&self) -> Result<(), crate::BrokerError> {
        if self.max == 0 || self.max as usize > crate::MAX_BATCH {
            return Err(crate::BrokerError::InvalidArgument(format!(
                "max must be within 1..={}, got {}",
                crate::MAX_BATCH,
                self.max
            )));
        }
        check_lease_ms(self.lease_ms)
    }
}

/// A lease length given explicitly (lease, `lease_message`, extend) must be
/// at least 1 ms.
pub fn check_lease_ms(lease_ms: Option<u64>) -> Result<(), crate::BrokerError> {
    if lease_ms == Some(0) {
        return Err(crate::BrokerError::InvalidArgument(
            "lease_ms must be at least 1".into(),
        ));
    }
    Ok(())
}

impl Default for LeaseRequest {
    fn default() -> Self {
        Self {
            max: 1,
            wait_ms: 0,
            lease_ms: None,
        }
    }
}

/// One delivery: a message handed to a consumer under a lease.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    pub queue: QueueName,
    pub id: MessageId,
    pub seq: u64,
    pub lease_id: LeaseId,
    pub lease_until: u64,
    /// 1 for the first delivery.
    pub attempt: u32,
    pub deliver_at: u64,
    pub priority: u32,
    pub headers: BTreeMap<String, String>,
    pub payload: Vec<u8>,
    pub key: Option<FlowKey>,
}

/// A failed delivery reported by the consumer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nack {
    /// `None`: the queue's retry backoff (with jitter).
    pub delay_ms: Option<u64>,
    /// A new priority (beanstalkd `release <pri>`); unchanged when `None`.
    pub priority: Option<u32>,
    /// Whether this nack counts towards `max_attempts`. The HTTP API always
    /// counts; beanstalkd's `release` never buries a job, so it does not.
    pub may_die: bool,
    /// The delivery was not an attempt (the consumer was told to slow
    /// down): on a queue with `flow` the deferral rule applies
    /// ([`crate::flow::FlowConfig::defer`]); on a queue without it,
    /// `InvalidArgument`.
    pub defer: bool,
    /// Why the delivery failed (at most [`MAX_ERROR_BYTES`]): kept as the
    /// message's `last_error`.
    pub error: Option<String>,
    /// Set by the push dispatcher: the failed push this nack reports (its
    /// event is `push_failed`, or a deferral for `push_429`/`push_503`).
    pub push: Option<crate::events::PushFailure>,
}

impl Default for Nack {
    fn default() -> Self {
        Self {
            delay_ms: None,
            priority: None,
            may_die: true,
            defer: false,
            error: None,
            push: None,
        }
    }
}

/// The longest failure text a nack may carry, in bytes (api.md).
pub const MAX_ERROR_BYTES: usize = 1024;

impl Nack {
    /// The argument rules of every nack, in every broker: an `error` of at
    /// most [`MAX_ERROR_BYTES`].
    pub fn validate(&self) -> Result<(), crate::BrokerError> {
        match &self.error {
            Some(error) if error.len() > MAX_ERROR_BYTES => {
                Err(crate::BrokerError::InvalidArgument(format!(
                    "error must be at most {MAX_ERROR_BYTES} bytes of UTF-8, got {}",
                    error.len()
                )))
            }
            _ => Ok(()),
        }
    }

    /// The history event of the failed delivery this nack reports (not a
    /// deferral): `push_failed` for the push dispatcher's, else `nacked`.
    pub fn event(&self) -> crate::events::EventKind {
        match self.push {
            Some(push) => crate::events::EventKind::PushFailed {
                status: push.status,
                error: self.error.clone().unwrap_or_default(),
                duration_ms: push.duration_ms,
            },
            None => crate::events::EventKind::Nacked {
                delay_ms: self.delay_ms,
                error: self.error_text().map(str::to_owned),
            },
        }
    }

    /// Why a deferral by this nack happened (its event's `reason`).
    pub fn defer_reason(&self) -> crate::events::DeferReason {
        match self.push.and_then(|p| p.status) {
            Some(429) => crate::events::DeferReason::Push429,
            Some(503) => crate::events::DeferReason::Push503,
            _ => crate::events::DeferReason::Nack,
        }
    }

    /// The failure's text to keep as the message's `last_error`: none for
    /// a nack without `error` or with an empty one (the last one stays).
    pub fn error_text(&self) -> Option<&str> {
        self.error.as_deref().filter(|e| !e.is_empty())
    }
}

/// `text` cut to at most `max` bytes, at a character boundary (a failure
/// text a server makes itself, such as a push's answer).
pub fn truncate_text(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `PATCH` of a scheduled or ready message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reschedule {
    pub schedule: Option<Schedule>,
    pub priority: Option<u32>,
}

/// Which messages to list, in the state's natural order: scheduled by
/// (deliver_at, seq); ready by (priority, deliver_at, seq); leased by
/// (lease_until, seq); dead by (died_at, seq).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListQuery {
    pub state: MessageState,
    /// Continue after this message (the last id of the previous page).
    pub after: Option<MessageId>,
    pub limit: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Redrive {
    /// Every dead message of the queue.
    All,
    /// These ids; ids that are not dead are ignored.
    Ids(Vec<MessageId>),
    /// The `n` oldest deaths (beanstalkd `kick n`).
    Oldest(u64),
}
