//! A message's history (api.md, "Message history"): each transition
//! appends an [`Event`]; a message keeps its last [`HISTORY_LEN`] and
//! counts the older ones as dropped. The history lives and ends with the
//! message (and its retention).
//!
//! Every backend appends the same events at the same transitions; the
//! model is the reference (`testkit::state`), and the conformance cases of
//! `conformance_tests_history!` check each event type.

use serde::{Deserialize, Serialize};

/// Events a message keeps; older ones are dropped (and counted).
pub const HISTORY_LEN: usize = 32;

/// Which frontend handed out a delivery.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// An HTTP lease call (and the client crates' workers).
    #[default]
    Http,
    /// The beanstalkd protocol's `reserve`.
    Beanstalk,
    /// The push dispatcher.
    Push,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Http => "http",
            Via::Beanstalk => "beanstalk",
            Via::Push => "push",
        }
    }
}

/// Why a delivery was deferred.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeferReason {
    /// A nack with `defer: true`.
    Nack,
    /// A push answered 429.
    Push429,
    /// A push answered 503 with `Retry-After`.
    Push503,
}

impl DeferReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DeferReason::Nack => "nack",
            DeferReason::Push429 => "push_429",
            DeferReason::Push503 => "push_503",
        }
    }
}

/// Why a message died.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeathReason {
    /// A failed attempt with `attempts >= max_attempts`.
    MaxAttempts,
    /// A deferral past `flow.max_deferrals`.
    MaxDeferrals,
    /// Buried (beanstalkd `bury`).
    Buried,
}

impl DeathReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DeathReason::MaxAttempts => "max_attempts",
            DeathReason::MaxDeferrals => "max_deferrals",
            DeathReason::Buried => "buried",
        }
    }
}

/// What happened (api.md's event types, each with its fields).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    Enqueued,
    /// Its content replaced by an enqueue of its id (`on_conflict`).
    Replaced {
        after_lease: bool,
    },
    /// Its due time or priority changed (`PATCH`).
    Rescheduled,
    Leased {
        lease_until: u64,
        via: Via,
    },
    Acked,
    Nacked {
        delay_ms: Option<u64>,
        error: Option<String>,
    },
    Deferred {
        until: u64,
        reason: DeferReason,
    },
    /// Its lease ran out.
    Expired,
    PushFailed {
        status: Option<u16>,
        error: String,
        duration_ms: u64,
    },
    Dead {
        reason: DeathReason,
    },
    Redriven,
    Cancelled,
}

impl EventKind {
    /// The event's `type` on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Enqueued => "enqueued",
            EventKind::Replaced { .. } => "replaced",
            EventKind::Rescheduled => "rescheduled",
            EventKind::Leased { .. } => "leased",
            EventKind::Acked => "acked",
            EventKind::Nacked { .. } => "nacked",
            EventKind::Deferred { .. } => "deferred",
            EventKind::Expired => "expired",
            EventKind::PushFailed { .. } => "push_failed",
            EventKind::Dead { .. } => "dead",
            EventKind::Redriven => "redriven",
            EventKind::Cancelled => "cancelled",
        }
    }
}

/// One transition of a message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// When it happened (wall-clock ms).
    pub at: u64,
    /// The message's attempt number after the event.
    pub attempt: u32,
    pub kind: EventKind,
}

/// A message's kept events, oldest first, and how many older ones were
/// dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    pub events: Vec<Event>,
    pub dropped: u64,
}

impl History {
    /// Appends `event`, dropping the oldest beyond [`HISTORY_LEN`].
    pub fn push(&mut self, event: Event) {
        if self.events.len() >= HISTORY_LEN {
            let over = self.events.len() + 1 - HISTORY_LEN;
            self.events.drain(..over);
            self.dropped += over as u64;
        }
        self.events.push(event);
    }
}

/// How a push failed, for its history event (with the nack that reports
/// it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PushFailure {
    /// The HTTP status, `None` for a transport error (timeout, refused).
    pub status: Option<u16>,
    /// How long the request took.
    pub duration_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_events_and_counts_the_dropped() {
        let mut h = History::default();
        for at in 0..40 {
            h.push(Event {
                at,
                attempt: 0,
                kind: EventKind::Rescheduled,
            });
        }
        assert_eq!(h.events.len(), HISTORY_LEN);
        assert_eq!(h.dropped, 40 - HISTORY_LEN as u64);
        assert_eq!(h.events[0].at, 40 - HISTORY_LEN as u64);
        assert_eq!(h.events.last().map(|e| e.at), Some(39));
    }
}
