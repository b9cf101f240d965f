//! The operations of a history and their JSON-lines form.
//!
//! Every operation carries the client's `invoke` and `complete` times (ms,
//! one clock for the whole history): the server did what the operation
//! asked somewhere in between. Times the server states (`deliver_at`,
//! `lease_until`, `fire_at`) are on the server's clock; the checker allows
//! [`crate::CheckConfig::slack_ms`] between the two.

use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};

/// One line of a history file: `{"op": "<kind>", ...fields}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    QueueConfig(QueueConfig),
    Enqueue(Enqueue),
    Lease(Lease),
    LeaseFailed(LeaseFailed),
    Ack(LeaseCall),
    Nack(Nack),
    Extend(Extend),
    Bury(LeaseCall),
    Cancel(MessageCall),
    Reschedule(Reschedule),
    Redrive(QueueCall),
    DeleteQueue(QueueCall),
    Crash(Crash),
    Restart(Span),
    Schedule(ScheduleChange),
    Fire(Fire),
    FiresObserved(FiresObserved),
    Observe(Observe),
    Stop(Stop),
}

/// When an operation ran, on the client's clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Span {
    pub invoke: u64,
    pub complete: u64,
}

/// What a call's answer says it did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It took effect (201/200/204).
    #[default]
    Ok,
    /// It was refused and changed nothing (a 4xx other than the two below).
    Error,
    /// 409 `lease_mismatch`: nothing changed.
    LeaseMismatch,
    /// 404: nothing changed.
    NotFound,
    /// No answer, a 5xx, a timeout, a crash: it may or may not have
    /// taken effect.
    Unknown,
}

impl Outcome {
    /// It certainly took effect.
    pub fn took_effect(self) -> bool {
        self == Outcome::Ok
    }

    /// It may have taken effect.
    pub fn may_have(self) -> bool {
        matches!(self, Outcome::Ok | Outcome::Unknown)
    }
}

/// A queue's configuration as it is after this call (a `PUT` merges; the
/// history states the result). `flow: null` is a queue without flow.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    pub invoke: u64,
    pub complete: u64,
    pub queue: String,
    #[serde(default)]
    pub outcome: Outcome,
    #[serde(default)]
    pub max_attempts: Option<u32>,
    #[serde(default)]
    pub retry: Option<Retry>,
    #[serde(default)]
    pub flow: Option<Flow>,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retry {
    pub initial_ms: u64,
    pub max_ms: u64,
    pub multiplier: f64,
}

/// A queue's `flow` (api.md, "Flow control").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Flow {
    #[serde(default)]
    pub concurrency: Option<u32>,
    #[serde(default)]
    pub key_concurrency: Option<u32>,
    #[serde(default)]
    pub rate: Option<Rate>,
    #[serde(default)]
    pub key_rate: Option<Rate>,
    #[serde(default)]
    pub ordered: bool,
    #[serde(default)]
    pub max_deferrals: Option<u32>,
}

impl Flow {
    /// Leases a key may hold at once: `key_concurrency`, 1 with `ordered`.
    pub fn key_slots(&self) -> Option<u32> {
        if self.ordered {
            Some(1)
        } else {
            self.key_concurrency
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    pub limit: u64,
    pub period_ms: u64,
    /// api.md's default when absent: `max(2, ceil(limit / period_ms) + 1)`.
    #[serde(default)]
    pub burst: Option<u64>,
}

impl Rate {
    pub fn burst(&self) -> u64 {
        self.burst
            .unwrap_or_else(|| 2.max(self.limit.div_ceil(self.period_ms.max(1)) + 1))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Enqueue {
    pub invoke: u64,
    pub complete: u64,
    pub queue: String,
    pub id: String,
    /// `Ok` is an answer with `created: true`; `exists` below marks
    /// `created: false`.
    pub outcome: Outcome,
    /// 200 `created: false`: the id was live, nothing was created.
    #[serde(default)]
    pub exists: bool,
    /// From the answer; required when created.
    #[serde(default)]
    pub seq: Option<u64>,
    #[serde(default)]
    pub deliver_at: Option<u64>,
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub priority: Option<u32>,
}

/// One message handed out by a lease call (a call that returns `n`
/// messages is `n` lines with the same times).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lease {
    pub invoke: u64,
    pub complete: u64,
    pub queue: String,
    pub id: String,
    pub seq: u64,
    pub attempt: u32,
    pub lease_id: String,
    pub lease_until: u64,
    pub deliver_at: u64,
    #[serde(default)]
    pub key: Option<String>,
    /// The server's grant time, when the client can tell it exactly
    /// (`lease_until - lease_ms`): checked against `deliver_at` without
    /// slack, both being server times.
    #[serde(default)]
    pub granted_at: Option<u64>,
}

/// A lease call whose answer was lost: it may have handed out messages
/// of `queue` the client never saw.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseFailed {
    pub invoke: u64,
    pub complete: u64,
    pub queue: String,
}

/// `ack` or `bury` of one delivery.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseCall {
    pub invoke: u64,
    pub complete: u64,
    pub queue: String,
    pub id: String,
    pub lease_id: String,
    pub outcome: Outcome,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nack {
    pub invoke: u64,
    pub complete: u64,
    pub queue: String,
    pub id: String,
    pub lease_id: String,
    pub outcome: Outcome,
    #[serde(default)]
    pub defer: bool,
    #[serde(default)]
    pub delay_ms: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Extend {
    pub invoke: u64,
    pub complete: u64,
    pub queue: String,
    pub id: String,
    pub lease_id: String,
    pub outcome: Outcome,
    /// The answer's new `lease_until` (when `ok`).
    #[serde(default)]
    pub lease_until: Option<u64>,
}

/// A call on a message by id (cancel).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageCall {
    pub invoke: u64,
    pub complete: u64,
    pub queue: String,
    pub id: String,
    pub outcome: Outcome,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reschedule {
    pub invoke: u64,
    pub complete: u64,
    pub queue: String,
    pub id: String,
    pub outcome: Outcome,
    #[serde(default)]
    pub deliver_at: Option<u64>,
}

/// A call on a whole queue (redrive of its dead messages, delete).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueCall {
    pub invoke: u64,
    pub complete: u64,
    pub queue: String,
    pub outcome: Outcome,
}

/// The server (or the store under it) died somewhere in `at`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Crash {
    pub invoke: u64,
    pub complete: u64,
    /// Whether the leases held then end (a restart of the embedded store:
    /// yes; one stateless node of several on Redis: no).
    #[serde(default = "yes")]
    pub ends_leases: bool,
    /// It may not have happened (a failed write whose in-process reopen
    /// the client cannot see): it explains, it never convicts.
    #[serde(default)]
    pub maybe: bool,
}

fn yes() -> bool {
    true
}

/// A change of a recurring schedule (only `every_ms` schedules are
/// checked for missed fire times; any schedule for fires at most once).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleChange {
    pub invoke: u64,
    pub complete: u64,
    pub queue: String,
    pub schedule: String,
    pub action: ScheduleAction,
    pub outcome: Outcome,
    /// For `put` of an `every_ms` schedule: its definition.
    #[serde(default)]
    pub every: Option<Every>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleAction {
    #[default]
    Put,
    Pause,
    Resume,
    Delete,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Every {
    pub every_ms: u64,
    pub start_at: u64,
    #[serde(default)]
    pub end_at: Option<u64>,
    /// `true` for `catchup: all`, `false` for `latest`.
    #[serde(default)]
    pub catchup_all: bool,
    pub catchup_window_ms: u64,
    #[serde(default)]
    pub paused: bool,
}

/// The message of a schedule's fire time, as the client saw it (listed or
/// leased): id `<schedule>:<fire_at>`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fire {
    pub invoke: u64,
    pub complete: u64,
    pub queue: String,
    pub schedule: String,
    pub fire_at: u64,
    pub seq: u64,
}

/// The client has recorded every fire message of `schedule` whose fire
/// time is at most `through` (a full listing of a queue nobody consumes,
/// say): a fire time that should have fired and has no `fire` line is
/// missed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FiresObserved {
    pub invoke: u64,
    pub complete: u64,
    pub queue: String,
    pub schedule: String,
    pub through: u64,
}

/// A read of one message (a `GET`) and what it answered.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observe {
    pub invoke: u64,
    pub complete: u64,
    pub queue: String,
    pub id: String,
    pub state: Observed,
    #[serde(default)]
    pub seq: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Observed {
    /// Live: scheduled, ready, leased.
    #[default]
    Live,
    Dead,
    /// 404.
    Absent,
}

/// The run ended at `at`. `drained`: consumers ran until every message due
/// by then was consumed, so every acknowledged enqueue due by then must be
/// acked, cancelled or dead. Without `drained`, an acknowledged enqueue not
/// ended must have been observed live after its last change.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stop {
    pub at: u64,
    #[serde(default)]
    pub drained: bool,
}

impl Op {
    /// When the operation ran (a `stop` is an instant).
    pub fn span(&self) -> Span {
        match self {
            Op::QueueConfig(o) => o.at(),
            Op::Enqueue(o) => o.at(),
            Op::Lease(o) => o.at(),
            Op::LeaseFailed(o) => o.at(),
            Op::Ack(o) | Op::Bury(o) => o.at(),
            Op::Nack(o) => o.at(),
            Op::Extend(o) => o.at(),
            Op::Cancel(o) => o.at(),
            Op::Reschedule(o) => o.at(),
            Op::Redrive(o) | Op::DeleteQueue(o) => o.at(),
            Op::Crash(o) => o.at(),
            Op::Restart(s) => *s,
            Op::Schedule(o) => o.at(),
            Op::Fire(o) => o.at(),
            Op::FiresObserved(o) => o.at(),
            Op::Observe(o) => o.at(),
            Op::Stop(o) => Span {
                invoke: o.at,
                complete: o.at,
            },
        }
    }
}

/// `invoke` and `complete` of an operation's line as one [`Span`].
macro_rules! spanned {
    ($($t:ty),*) => {$(
        impl $t {
            pub fn at(&self) -> Span {
                Span { invoke: self.invoke, complete: self.complete }
            }
        }
    )*};
}

spanned!(
    QueueConfig,
    Enqueue,
    Lease,
    LeaseFailed,
    LeaseCall,
    Nack,
    Extend,
    MessageCall,
    Reschedule,
    QueueCall,
    Crash,
    ScheduleChange,
    Fire,
    FiresObserved,
    Observe
);

/// A line of a history file that is not an operation.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("line {line}: {source}")]
    Parse {
        line: usize,
        source: serde_json::Error,
    },
    #[error("reading the history: {0}")]
    Io(#[from] std::io::Error),
}

/// A recorded run: its operations, in any order (the checker orders them by
/// their times).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    pub ops: Vec<Op>,
}

impl History {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, op: Op) {
        self.ops.push(op);
    }

    /// Reads JSON lines (blank lines are skipped).
    pub fn read(input: impl BufRead) -> Result<Self, ReadError> {
        let mut ops = Vec::new();
        for (n, line) in input.lines().enumerate() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let op = serde_json::from_str(&line).map_err(|source| ReadError::Parse {
                line: n + 1,
                source,
            })?;
            ops.push(op);
        }
        Ok(Self { ops })
    }

    /// Writes one operation per line.
    pub fn write(&self, mut out: impl Write) -> std::io::Result<()> {
        for op in &self.ops {
            serde_json::to_writer(&mut out, op)?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }
}
