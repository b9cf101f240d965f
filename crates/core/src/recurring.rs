//! Recurring schedules: the definition, its fire times, and the plan of
//! a fire (api.md, "Schedules"); the firing step itself is
//! [`crate::firing`].
//!
//! # Layout
//! - [`ScheduleId`]: the validated schedule id (`[A-Za-z0-9._-]{1,128}`).
//! - [`Recurrence`]: `cron` (in a zone) or `every_ms`, compiled once into a
//!   [`FireTimes`] that answers "the first fire time at or after `t`".
//! - [`ScheduleDefinition`]: what a `PUT` gives (defaults filled in), with
//!   its validation ([`ScheduleDefinition::validate`]).
//! - [`ScheduleRecord`]: what a backend stores per schedule: the definition,
//!   the revision, the fire count, and the *cursor* (`next_fire_at`, the
//!   next fire time not yet handled). Its methods are the schedule's
//!   transitions (create, replace, pause, resume, fire), pure functions of
//!   the record and the time, so every backend and the model compute the
//!   same thing.
//!
//! # How a backend fires
//! When the cursor is due (`next_fire_at <= now`), the backend calls
//! [`crate::firing::fire_step`], which reads what it needs of the previous
//! fire's message, calls [`ScheduleRecord::plan`] (which fire times to
//! enqueue, how many were missed or skipped, the new cursor) and returns
//! the messages ([`ScheduleRecord::fire_request`] of each planned time)
//! and the advanced record ([`ScheduleRecord::apply`]). The backend stores
//! both **in one atomic step**: one
//! write batch in the local store, one function call in Redis (compare the
//! stored cursor and revision first, so two nodes racing fire once). The
//! message id `<schedule id>:<t>` is a second guard. A plan fires at most
//! [`MAX_FIRES_PER_STEP`] times; if the new cursor is still due, the
//! backend plans again.
//!
//! # Time zones and DST
//! Zones come from `chrono-tz`, whose IANA database is compiled into the
//! binary ([`TZDB_VERSION`]). The cron grammar and the DST rule are
//! croner's, which is api.md's rule: a *fixed-time* schedule (second,
//! minute and hour each one value) whose wall time falls in a gap fires at
//! the first instant after the gap, and in a fold at its first occurrence;
//! every other schedule fires at the instants whose wall time matches (none
//! in a gap, each occurrence in a fold).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use serde::{Deserialize, Serialize};

use crate::error::BrokerError;
use crate::message::{EnqueueRequest, Schedule};
use crate::model::{MessageId, QueueName};

/// The version of the IANA time-zone database compiled into the binary.
pub const TZDB_VERSION: &str = chrono_tz::IANA_TZDB_VERSION;

/// Most fire times one [`ScheduleRecord::plan`] enqueues.
pub const MAX_FIRES_PER_STEP: usize = 1000;

/// Most fire times one [`ScheduleRecord::plan`] looks at; the rest wait for
/// the next step.
const MAX_STEPS_PER_PLAN: usize = 20_000;

/// How long before the broker's "now" a `start_at` may lie and still count
/// as the creating request's time (see [`ScheduleRecord::create`]).
pub const CREATION_SLACK_MS: u64 = 1000;

/// How long before its fire time a fire's message is written, when the
/// schedule allows it (see [`ScheduleRecord::ahead`] and docs/schedules.md,
/// "Fires written ahead"). Shorter than a minute, so that a minutely
/// schedule writes its next fire half a period after a fire, away from
/// the fire instants.
pub const WRITE_AHEAD_MS: u64 = 30_000;

/// Smallest `every_ms`.
pub const MIN_EVERY_MS: u64 = 1000;

/// Default `catchup_window_ms`: one hour.
pub const DEFAULT_CATCHUP_WINDOW_MS: u64 = 3_600_000;

/// A cron must have a fire time within this long after its start (5 years).
pub const CRON_HORIZON_MS: u64 = 5 * 366 * 24 * 3_600_000;

/// How many upcoming fire times a schedule object shows (`next_fires`).
pub const NEXT_FIRES_SHOWN: usize = 5;

/// The header naming the schedule on each fired message.
pub const HEADER_SCHEDULE: &str = "delayd-schedule";
/// The header carrying the fire time `t` on each fired message.
pub const HEADER_SCHEDULED_FOR: &str = "delayd-scheduled-for";

fn invalid(field: &str, reason: impl fmt::Display) -> BrokerError {
    BrokerError::InvalidArgument(format!("{field}: {reason}"))
}

/// A schedule id: `[A-Za-z0-9._-]{1,128}` (no `:`, so `<id>:<t>` message
/// ids cannot collide across schedules).
///
/// Shared text (`Arc<str>`): the armed index and the timer of a schedule
/// share one allocation.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ScheduleId(Arc<str>);

/// The schedule-id grammar as a regular expression (the OpenAPI
/// document's pattern); [`ScheduleId::new`] checks the same rule.
pub const SCHEDULE_ID_PATTERN: &str = "^[A-Za-z0-9._-]{1,128}$";

impl ScheduleId {
    pub const MAX_LEN: usize = 128;

    pub fn new(id: impl Into<String>) -> Result<Self, BrokerError> {
        let id = id.into();
        let valid_chars = id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if id.is_empty() || id.len() > Self::MAX_LEN || !valid_chars {
            let shown: String = id.chars().take(140).collect();
            return Err(BrokerError::InvalidArgument(format!(
                "schedule id must match [A-Za-z0-9._-]{{1,128}}, got {shown:?}"
            )));
        }
        Ok(Self(id.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id of the message of fire time `t`: `<schedule id>:<t>`.
    pub fn fire_message_id(&self, t: u64) -> MessageId {
        MessageId::new(format!("{}:{t}", self.0)).expect("schedule id and digits form a message id")
    }

    /// The id of a manual trigger's message at `now`.
    pub fn manual_message_id(&self, now: u64) -> MessageId {
        MessageId::new(format!("{}:manual:{now}", self.0))
            .expect("schedule id and digits form a message id")
    }
}

impl TryFrom<String> for ScheduleId {
    type Error = BrokerError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<ScheduleId> for String {
    fn from(value: ScheduleId) -> Self {
        value.0.to_string()
    }
}

impl fmt::Display for ScheduleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// When a schedule fires.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Recurrence {
    /// Wall-clock times in `tz` matching `expr` (5 or 6 fields, macros).
    Cron { expr: String, tz: String },
    /// `start_at + k * every_ms`, `k >= 0`.
    Every { every_ms: u64 },
}

/// Crons parsed so far, by expression: a firing step plans a
/// schedule several times (settle, plan, write ahead, wake time, the stored
/// head), and each plan needs the compiled cron. Parsing is the cost
/// (microseconds, under a backend's lock), so a definition's cron is parsed
/// once and found here after. Bounded: when full it is emptied, and the
/// crons in use are parsed again, once each.
struct CronCache {
    parsed: std::collections::HashMap<String, Arc<Cron>>,
}

/// Most crons kept parsed (a parsed cron is a few hundred bytes).
const CRON_CACHE_ENTRIES: usize = 4096;

static CRON_CACHE: std::sync::Mutex<Option<CronCache>> = std::sync::Mutex::new(None);

/// Crons parsed since the process started: what [`CronCache`] saves is
/// measured by it (tests count the parses of one firing step).
static CRON_PARSES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many crons were parsed since the process started.
pub fn cron_parses() -> u64 {
    CRON_PARSES.load(std::sync::atomic::Ordering::Relaxed)
}

/// `expr` parsed, from the cache when it was parsed before.
fn parse_cron(expr: &str) -> Result<Arc<Cron>, BrokerError> {
    // A panic while the cache is held leaves at worst an entry missing.
    let mut cache = CRON_CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let cache = cache.get_or_insert_with(|| CronCache {
        parsed: std::collections::HashMap::new(),
    });
    if let Some(cron) = cache.parsed.get(expr) {
        return Ok(Arc::clone(cron));
    }
    CRON_PARSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let cron = CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
        .parse(expr)
        .map_err(|e| invalid("cron", format_args!("{expr:?} does not parse: {e}")))?;
    let cron = Arc::new(cron);
    if cache.parsed.len() >= CRON_CACHE_ENTRIES {
        cache.parsed.clear();
    }
    cache.parsed.insert(expr.to_owned(), Arc::clone(&cron));
    Ok(cron)
}

impl Recurrence {
    /// Parses and checks the recurrence; `start_at` anchors `every_ms` and
    /// is where a cron must find a fire time within [`CRON_HORIZON_MS`].
    /// A cron parsed before is not parsed again (see [`CronCache`]).
    pub fn compile(&self, start_at: u64) -> Result<FireTimes, BrokerError> {
        match self {
            Self::Cron { expr, tz } => {
                let zone = Tz::from_str(tz)
                    .map_err(|_| invalid("tz", format_args!("unknown IANA time zone {tz:?}")))?;
                let cron = parse_cron(expr)?;
                let times = FireTimes::Cron { cron, zone };
                match times.at_or_after(start_at) {
                    Some(t) if t - start_at <= CRON_HORIZON_MS => Ok(times),
                    _ => Err(invalid(
                        "cron",
                        format_args!("{expr:?} has no fire time in the next 5 years"),
                    )),
                }
            }
            Self::Every { every_ms } => {
                if *every_ms < MIN_EVERY_MS {
                    return Err(invalid(
                        "every_ms",
                        format_args!("must be at least {MIN_EVERY_MS}, got {every_ms}"),
                    ));
                }
                Ok(FireTimes::Every {
                    anchor: start_at,
                    every_ms: *every_ms,
                })
            }
        }
    }
}

/// A compiled recurrence: the fire-time arithmetic.
#[derive(Clone, Debug)]
pub enum FireTimes {
    Cron { cron: Arc<Cron>, zone: Tz },
    Every { anchor: u64, every_ms: u64 },
}

impl FireTimes {
    /// The first fire time at or after `t` (epoch ms), if any before the
    /// year 5000 (croner's search limit).
    pub fn at_or_after(&self, t: u64) -> Option<u64> {
        match self {
            Self::Every { anchor, every_ms } => {
                if t <= *anchor {
                    return Some(*anchor);
                }
                let k = (t - anchor).div_ceil(*every_ms);
                k.checked_mul(*every_ms)?.checked_add(*anchor)
            }
            Self::Cron { cron, zone } => {
                // Cron times are whole seconds: round up to one.
                let secs = i64::try_from(t.div_ceil(1000)).ok()?;
                let start: DateTime<Tz> =
                    zone.from_utc_datetime(&DateTime::<Utc>::from_timestamp(secs, 0)?.naive_utc());
                let next = cron.find_next_occurrence(&start, true).ok()?;
                u64::try_from(next.timestamp_millis()).ok()
            }
        }
    }

    /// The first fire time strictly after `t`.
    pub fn after(&self, t: u64) -> Option<u64> {
        self.at_or_after(t.checked_add(1)?)
    }

    /// Up to `count` fire times at or after `from`, in order.
    pub fn list(&self, from: u64, count: usize) -> Vec<u64> {
        let mut fires = Vec::with_capacity(count);
        let mut next = self.at_or_after(from);
        while let Some(t) = next {
            if fires.len() >= count {
                break;
            }
            fires.push(t);
            next = self.after(t);
        }
        fires
    }
}

/// What each fire enqueues (the enqueue rules; no id, no delay).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageTemplate {
    pub payload: Vec<u8>,
    pub priority: Option<u32>,
    pub headers: BTreeMap<String, String>,
    pub max_attempts: Option<u32>,
    /// The flow key of every fire's message.
    #[serde(default)]
    pub key: Option<crate::flow::FlowKey>,
}

/// Which unfired past fire times are enqueued when the server gets to them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Catchup {
    /// Only the newest (inside the window).
    #[default]
    Latest,
    /// Each (inside the window), oldest first.
    All,
}

/// Whether a fire may enqueue while the previous fire's message is live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    #[default]
    Allow,
    /// Enqueue nothing while the previous fire's message is scheduled,
    /// ready or leased (a dead one does not block).
    Skip,
}

/// A schedule as defined by its `PUT` (defaults filled in, `start_at`
/// resolved). Two `PUT`s with equal definitions change nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleDefinition {
    pub recurrence: Recurrence,
    pub start_at: u64,
    pub end_at: Option<u64>,
    pub max_fires: Option<u64>,
    pub message: MessageTemplate,
    pub catchup: Catchup,
    pub catchup_window_ms: u64,
    pub overlap: Overlap,
    pub jitter_ms: u64,
    pub paused: bool,
}

impl ScheduleDefinition {
    /// api.md's 400 rules that need no wire: the recurrence compiles, the
    /// window is sane. Returns the compiled fire times.
    pub fn validate(&self) -> Result<FireTimes, BrokerError> {
        let times = self.recurrence.compile(self.start_at)?;
        if let Some(end_at) = self.end_at {
            if end_at <= self.start_at {
                return Err(invalid(
                    "end_at",
                    format_args!("must be after start_at ({}), got {end_at}", self.start_at),
                ));
            }
        }
        if self.max_fires == Some(0) {
            return Err(invalid("max_fires", "must be at least 1"));
        }
        if self.message.max_attempts == Some(0) {
            return Err(invalid("message.max_attempts", "must be at least 1"));
        }
        Ok(times)
    }

    fn fire_times(&self) -> Option<FireTimes> {
        self.recurrence.compile(self.start_at).ok()
    }
}

/// A stored schedule: its definition and where it stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleRecord {
    pub queue: QueueName,
    pub id: ScheduleId,
    pub definition: ScheduleDefinition,
    /// Increases with each change (replace, pause, resume).
    pub revision: u64,
    /// Fire times enqueued so far (not manual triggers, not skipped).
    pub fires: u64,
    /// The newest fire time enqueued.
    pub last_fire_at: Option<u64>,
    /// The cursor: the next fire time not yet handled. `None` once finished
    /// (end, max) or while paused.
    pub next_fire_at: Option<u64>,
    /// Time of the last change of definition (or resume): fire times before
    /// it are never enqueued.
    pub since: u64,
    /// The cursor's fire time when its message is already written (ahead
    /// of time, [`WRITE_AHEAD_MS`]). Until that time comes the record
    /// shows the fire as not yet handled; from then on [`Self::settled`]
    /// counts it as fired. Never set with `overlap: skip` (judged at the
    /// fire time); a change (replace, pause, delete) before that time
    /// clears it, and the backend cancels the message
    /// ([`Self::written_ahead`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ahead: Option<u64>,
}

/// What one firing step does; see [`ScheduleRecord::plan`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FirePlan {
    /// Fire times to enqueue, oldest first.
    pub fires: Vec<u64>,
    /// Fire times not enqueued because they were older than the window (or
    /// not the newest, with `catchup: latest`).
    pub missed: u64,
    /// Fire times not enqueued because of `overlap: skip`.
    pub skipped: u64,
    /// The cursor after the step.
    pub next_fire_at: Option<u64>,
}

impl FirePlan {
    /// Whether the step changes nothing (the cursor was not due).
    pub fn is_empty(&self) -> bool {
        self.fires.is_empty() && self.missed == 0 && self.skipped == 0
    }
}

impl ScheduleRecord {
    /// A new schedule, created at `now`. Validates the definition.
    pub fn create(
        queue: QueueName,
        id: ScheduleId,
        definition: ScheduleDefinition,
        now: u64,
    ) -> Result<Self, BrokerError> {
        let times = definition.validate()?;
        // A frontend resolves a default `start_at` to its request's time, a
        // moment before this call: that is the creation time, so its fire
        // time (`every_ms`'s first) is not "before the creation".
        let since = if now.saturating_sub(definition.start_at) <= CREATION_SLACK_MS {
            definition.start_at.min(now)
        } else {
            now
        };
        let mut record = Self {
            queue,
            id,
            definition,
            revision: 1,
            fires: 0,
            last_fire_at: None,
            next_fire_at: None,
            since,
            ahead: None,
        };
        record.next_fire_at = record.cursor_from(&times, since);
        Ok(record)
    }

    /// The record after a `PUT` of `definition` at `now`, or `None` when the
    /// definition is the current one (nothing changes). Validates it.
    pub fn replace(
        &self,
        definition: ScheduleDefinition,
        now: u64,
    ) -> Result<Option<Self>, BrokerError> {
        let times = definition.validate()?;
        if definition == self.definition {
            return Ok(None);
        }
        let mut record = self.clone();
        record.definition = definition;
        record.revision += 1;
        record.since = now;
        record.ahead = None;
        record.next_fire_at = record.cursor_from(&times, now);
        Ok(Some(record))
    }

    /// The record paused at `now` (`None`: already paused).
    pub fn pause(&self, now: u64) -> Option<Self> {
        if self.definition.paused {
            return None;
        }
        let mut record = self.clone();
        record.definition.paused = true;
        record.revision += 1;
        record.since = now;
        record.next_fire_at = None;
        record.ahead = None;
        Some(record)
    }

    /// The record resumed at `now` (`None`: not paused). Fire times that
    /// passed while paused are not fired.
    pub fn resume(&self, now: u64) -> Option<Self> {
        if !self.definition.paused {
            return None;
        }
        let mut record = self.clone();
        record.definition.paused = false;
        record.revision += 1;
        record.since = now;
        record.next_fire_at = record
            .definition
            .fire_times()
            .and_then(|times| record.cursor_from(&times, now));
        Some(record)
    }

    /// The first fire time at or after `from` that may still fire (not
    /// paused, not before `start_at` or `since`, before `end_at`, under
    /// `max_fires`).
    fn cursor_from(&self, times: &FireTimes, from: u64) -> Option<u64> {
        let t = times.at_or_after(from.max(self.definition.start_at).max(self.since))?;
        self.within_limits(t)
    }

    /// `t`, a fire time `times` gave, as the cursor: [`Self::cursor_from`]
    /// without searching for `t` again when it is already past `start_at`
    /// and `since`. A search is not idempotent: a cron time moved to the
    /// end of a DST gap (02:30 that day is 03:00) is not found again by a
    /// search starting at 03:00, which would skip that day's fire.
    fn cursor_at(&self, times: &FireTimes, t: u64) -> Option<u64> {
        if t >= self.definition.start_at.max(self.since) {
            self.within_limits(t)
        } else {
            self.cursor_from(times, t)
        }
    }

    /// `t` as the cursor, unless paused, out of fires or at or past `end_at`.
    fn within_limits(&self, t: u64) -> Option<u64> {
        let definition = &self.definition;
        if definition.paused || definition.max_fires.is_some_and(|max| self.fires >= max) {
            return None;
        }
        match definition.end_at {
            Some(end_at) if t >= end_at => None,
            _ => Some(t),
        }
    }

    /// Whether the cursor is due at `now`.
    pub fn is_due(&self, now: u64) -> bool {
        self.next_fire_at.is_some_and(|t| t <= now)
    }

    /// The record as it stands at `now`: a fire written ahead whose time
    /// has come counts as fired (`fires`, `last_fire_at`, the cursor moved
    /// on), exactly as if its message had been written at its fire time.
    /// Every read of a record, and every change, starts from this.
    pub fn settled(&self, now: u64) -> Self {
        match self.ahead {
            Some(t) if t <= now => {
                let plan = self.plan(t, false);
                debug_assert_eq!(plan.fires, [t], "settling {self:?}");
                let mut record = self.apply(&plan);
                record.ahead = None;
                record
            }
            _ => self.clone(),
        }
    }

    /// The message written ahead for a fire time after `now`, which a
    /// change (replace, pause, delete) at `now` cancels. Call it on the
    /// [settled](Self::settled) record.
    pub fn written_ahead(&self, now: u64) -> Option<MessageId> {
        self.ahead
            .filter(|&t| t > now)
            .map(|t| self.id.fire_message_id(t))
    }

    /// The message a change (replace, pause, delete) at `now` deletes: the
    /// fire [written ahead](Self::written_ahead) for a later time, unless a
    /// worker holds it (a client moved it forward and leased it; api.md: "A
    /// pause, delete or replace cancels a fire enqueued ahead unless it is
    /// leased"). `state_of` reads that message's state, with time settled
    /// (`None`: it is gone). Call it on the [settled](Self::settled)
    /// record. The Lua `sched_set` ports the lease check (docs/redis.md,
    /// "Lua ports").
    pub fn cancelled_by_change<E>(
        &self,
        now: u64,
        state_of: impl FnOnce(&MessageId) -> Result<Option<crate::message::MessageState>, E>,
    ) -> Result<Option<MessageId>, E> {
        let Some(id) = self.written_ahead(now) else {
            return Ok(None);
        };
        Ok(match state_of(&id)? {
            Some(state) if state != crate::message::MessageState::Leased => Some(id),
            _ => None,
        })
    }

    /// Whether the message of the cursor's fire time `t` may be written
    /// ahead: `overlap: allow` (`skip` is judged at the fire time) and the
    /// plan at `t` fires exactly `t`.
    fn writable_ahead(&self, t: u64) -> bool {
        self.definition.overlap == Overlap::Allow
            && self.ahead.is_none()
            && self.next_fire_at == Some(t)
            && self.plan(t, false).fires == [t]
    }

    /// The fire time whose message a firing step at `now` writes ahead:
    /// the cursor, when it is within [`WRITE_AHEAD_MS`] after `now` and
    /// [writable ahead](Self::writable_ahead).
    pub fn ahead_due(&self, now: u64) -> Option<u64> {
        self.next_fire_at
            .filter(|&t| t > now && t - now <= WRITE_AHEAD_MS && self.writable_ahead(t))
    }

    /// When the backend runs the next firing step
    /// ([`crate::firing::fire_step`]): [`WRITE_AHEAD_MS`] before the cursor
    /// when its message can be written ahead; with it written, not before
    /// its fire time and then when the next one can be written ahead; else
    /// at the cursor. `None`: nothing left to do (paused, finished).
    pub fn wake_at(&self) -> Option<u64> {
        let t = self.next_fire_at?;
        if self.ahead == Some(t) {
            let next = self.settled(t).next_fire_at;
            return Some(next.map_or(t, |n| n.saturating_sub(WRITE_AHEAD_MS).max(t)));
        }
        if self.writable_ahead(t) {
            return Some(t.saturating_sub(WRITE_AHEAD_MS));
        }
        Some(t)
    }

    /// Whether a firing step at `now` has work: the wake time has come.
    pub fn needs_step(&self, now: u64) -> bool {
        self.wake_at().is_some_and(|t| t <= now)
    }

    /// What firing at `now` does. `previous_live` says whether the message
    /// of [`last_fire_at`](Self::last_fire_at) is scheduled, ready or
    /// leased (only read with `overlap: skip`). An empty plan when the
    /// cursor is not due.
    pub fn plan(&self, now: u64, previous_live: bool) -> FirePlan {
        let mut plan = FirePlan {
            next_fire_at: self.next_fire_at,
            ..FirePlan::default()
        };
        let Some(times) = self.definition.fire_times() else {
            return plan;
        };
        let definition = &self.definition;
        let window_start = now.saturating_sub(definition.catchup_window_ms);
        let mut blocked = definition.overlap == Overlap::Skip && previous_live;
        let mut fires = self.fires;
        let mut due = Vec::new();
        let mut cursor = self.next_fire_at;
        // Bounded work per step: a still-due cursor is planned again.
        let mut steps = 0;
        while let Some(t) = cursor.filter(|&t| t <= now) {
            steps += 1;
            if definition.end_at.is_some_and(|end| t >= end) {
                cursor = None;
                break;
            }
            if steps > MAX_STEPS_PER_PLAN
                || due.len() >= MAX_FIRES_PER_STEP
                || definition.max_fires.is_some_and(|max| fires >= max)
            {
                break;
            }
            if t < window_start {
                plan.missed += 1;
                // Jump over a long outage instead of walking it.
                if plan.missed.is_multiple_of(10_000) {
                    cursor = times.at_or_after(window_start);
                    continue;
                }
            } else if definition.catchup == Catchup::Latest
                && times
                    .after(t)
                    .is_some_and(|n| n <= now && definition.end_at.is_none_or(|end| n < end))
            {
                plan.missed += 1;
            } else if blocked {
                plan.skipped += 1;
            } else {
                due.push(t);
                fires += 1;
                blocked = definition.overlap == Overlap::Skip;
            }
            cursor = times.after(t);
        }
        let record = Self {
            fires,
            ..self.clone()
        };
        plan.next_fire_at = cursor.and_then(|t| record.cursor_at(&times, t));
        plan.fires = due;
        plan
    }

    /// The record after `plan` was carried out.
    pub fn apply(&self, plan: &FirePlan) -> Self {
        let mut record = self.clone();
        record.fires += plan.fires.len() as u64;
        if let Some(&t) = plan.fires.last() {
            record.last_fire_at = Some(t);
        }
        record.next_fire_at = plan.next_fire_at;
        record
    }

    /// The message of fire time `t`: id `<schedule id>:<t>`, `deliver_at`
    /// `t` plus its jitter, the template's fields and the schedule headers.
    pub fn fire_request(&self, t: u64) -> EnqueueRequest {
        let mut request = self.template_request(self.id.fire_message_id(t));
        request.schedule = Schedule::At(t + jitter(&self.id, t, self.definition.jitter_ms));
        request
            .headers
            .insert(HEADER_SCHEDULED_FOR.into(), t.to_string());
        request
    }

    /// The message of a manual trigger at `now` (no jitter; not a fire).
    pub fn trigger_request(&self, now: u64) -> EnqueueRequest {
        let mut request = self.template_request(self.id.manual_message_id(now));
        request.schedule = Schedule::At(now);
        request
    }

    fn template_request(&self, id: MessageId) -> EnqueueRequest {
        let template = &self.definition.message;
        let mut headers = template.headers.clone();
        headers.insert(HEADER_SCHEDULE.into(), self.id.to_string());
        EnqueueRequest {
            id: Some(id),
            schedule: Schedule::Now,
            priority: template.priority,
            headers,
            payload: template.payload.clone(),
            max_attempts: template.max_attempts,
            lease_ms: None,
            key: template.key.clone(),
            ..EnqueueRequest::default()
        }
    }

    /// The id of the message of the newest fire, whose liveness `overlap:
    /// skip` checks.
    pub fn previous_message(&self) -> Option<MessageId> {
        self.last_fire_at.map(|t| self.id.fire_message_id(t))
    }

    /// The next [`NEXT_FIRES_SHOWN`] fire times from the cursor (within
    /// `end_at` and `max_fires`).
    pub fn next_fires(&self) -> Vec<u64> {
        let (Some(cursor), Some(times)) = (self.next_fire_at, self.definition.fire_times()) else {
            return Vec::new();
        };
        let remaining = self
            .definition
            .max_fires
            .map_or(NEXT_FIRES_SHOWN as u64, |max| {
                max.saturating_sub(self.fires)
            });
        times
            .list(cursor, NEXT_FIRES_SHOWN.min(remaining as usize))
            .into_iter()
            .filter(|&t| self.definition.end_at.is_none_or(|end| t < end))
            .collect()
    }
}

/// A fire's jitter: `[0, jitter_ms)`, a function of the schedule id and the
/// fire time only (FNV-1a, stable across versions and nodes).
pub fn jitter(id: &ScheduleId, t: u64, jitter_ms: u64) -> u64 {
    if jitter_ms == 0 {
        return 0;
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id.as_str().bytes().chain(t.to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash % jitter_ms
}

/// `POST /v1/schedules/preview`: up to `count` fire times at or after
/// `start_at`, exactly as a schedule anchored there fires them: the times
/// come from [`ScheduleRecord::create`] and [`ScheduleRecord::plan`], the
/// code every backend fires with, stepped from fire time to fire time (so
/// the preview cannot disagree with the firing).
pub fn preview(
    recurrence: &Recurrence,
    start_at: u64,
    count: usize,
) -> Result<Vec<u64>, BrokerError> {
    let definition = ScheduleDefinition {
        recurrence: recurrence.clone(),
        start_at,
        end_at: None,
        max_fires: None,
        message: MessageTemplate::default(),
        catchup: Catchup::All,
        catchup_window_ms: u64::MAX,
        overlap: Overlap::Allow,
        jitter_ms: 0,
        paused: false,
    };
    let queue = QueueName::new("preview")?;
    let id = ScheduleId::new("preview")?;
    let mut record = ScheduleRecord::create(queue, id, definition, start_at)?;
    let mut fires = Vec::with_capacity(count);
    while fires.len() < count {
        let Some(t) = record.next_fire_at else {
            break;
        };
        // Firing at the cursor's own time: exactly that fire time is due.
        let plan = record.plan(t, false);
        debug_assert_eq!(plan.fires, [t], "preview step at {t}: {plan:?}");
        if plan.fires.is_empty() {
            break;
        }
        fires.extend_from_slice(&plan.fires);
        record = record.apply(&plan);
    }
    Ok(fires)
}

#[cfg(test)]
#[path = "recurring_tests.rs"]
mod tests;
