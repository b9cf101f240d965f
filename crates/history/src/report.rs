//! What the checker found: one [`Violation`] per broken promise, each
//! naming its [`Property`] and the operations involved.

use std::fmt;

use serde::Serialize;

/// The promises checked (crate docs, "Properties", say each one's rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Property {
    /// The history itself is inconsistent (a created enqueue without its
    /// seq, a lease line naming no delivery...).
    Malformed,
    /// An acknowledged enqueue is gone without an ack, cancel or delete.
    Lost,
    /// An acknowledged ack or cancel was undone (the message is back).
    Resurrected,
    /// Delivered before its due time.
    Early,
    /// Delivered again with nothing to explain it.
    Duplicate,
    /// One seq named two messages.
    SeqReused,
    /// An ack, nack, extend or bury accepted on a lease that had ended.
    AckAfterExpiry,
    /// A delivery's `attempt` is not what the rules count.
    Attempts,
    /// A deferral spent an attempt.
    Deferral,
    /// More leases of a flow queue open at once than its `concurrency`.
    Concurrency,
    /// More leases of one key open at once than `key_concurrency`.
    KeyConcurrency,
    /// More deliveries in a span than the queue's `rate` allows.
    Rate,
    /// More deliveries of one key in a span than `key_rate` allows.
    KeyRate,
    /// An ordered key's message delivered out of order, or while another
    /// message of the key held it.
    Order,
    /// A schedule's fire time enqueued twice.
    FireTwice,
    /// A schedule's fire time missed outside the catch-up rules.
    FireMissed,
}

impl Property {
    pub fn name(self) -> &'static str {
        match self {
            Property::Malformed => "malformed",
            Property::Lost => "lost",
            Property::Resurrected => "resurrected",
            Property::Early => "early",
            Property::Duplicate => "duplicate",
            Property::SeqReused => "seq_reused",
            Property::AckAfterExpiry => "ack_after_expiry",
            Property::Attempts => "attempts",
            Property::Deferral => "deferral",
            Property::Concurrency => "concurrency",
            Property::KeyConcurrency => "key_concurrency",
            Property::Rate => "rate",
            Property::KeyRate => "key_rate",
            Property::Order => "order",
            Property::FireTwice => "fire_twice",
            Property::FireMissed => "fire_missed",
        }
    }
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One broken promise.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub property: Property,
    /// `queue/id` (or `queue` or `queue/schedule`) it concerns.
    pub subject: String,
    /// What happened, with the times and lines involved.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.property, self.subject, self.detail)
    }
}

/// The checker's verdict.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub violations: Vec<Violation>,
    /// Operations read.
    pub ops: usize,
    /// Deliveries seen, and of them deliveries of a message delivered
    /// before (each explained, or a violation).
    pub deliveries: usize,
    pub redeliveries: usize,
    /// Acknowledged enqueues, and how many were still pending at the end
    /// of a run stopped early (observed live).
    pub acknowledged: usize,
    pub pending_at_stop: usize,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// Whether some violation is of `property`.
    pub fn has(&self, property: Property) -> bool {
        self.violations.iter().any(|v| v.property == property)
    }

    pub(crate) fn flag(&mut self, property: Property, subject: impl Into<String>, detail: String) {
        self.violations.push(Violation {
            property,
            subject: subject.into(),
            detail,
        });
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} ops, {} deliveries ({} redeliveries), {} acknowledged enqueues ({} pending at stop): {}",
            self.ops,
            self.deliveries,
            self.redeliveries,
            self.acknowledged,
            self.pending_at_stop,
            if self.ok() {
                "ok".to_string()
            } else {
                format!("{} violation(s)", self.violations.len())
            }
        )?;
        for v in &self.violations {
            writeln!(f, "  {v}")?;
        }
        Ok(())
    }
}

/// How the checker reads times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckConfig {
    /// Allowed difference between a time the server states (`deliver_at`,
    /// `lease_until`, `fire_at`) and the client's clock, in ms. 0 when the
    /// test injects the server's clock (the seeded explorer).
    pub slack_ms: u64,
    /// How late after its fire time a schedule's message may appear while
    /// the server is up (its timer, a loaded machine), in ms.
    pub fire_grace_ms: u64,
    /// Stop after this many violations (a broken run can break every
    /// promise a million times).
    pub max_violations: usize,
}

impl Default for CheckConfig {
    fn default() -> Self {
        Self {
            slack_ms: 1,
            fire_grace_ms: 2_000,
            max_violations: 1_000,
        }
    }
}
