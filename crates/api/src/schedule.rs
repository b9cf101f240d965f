//! Recurring schedules: the `PUT /v1/queues/{queue}/schedules/{id}` body,
//! the schedule object, the list, and the preview request and answer.
//!
//! A manual trigger answers with [`crate::Enqueued`], like an enqueue.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::payload::Payload;

/// Default `catchup_window_ms` (one hour, api.md).
pub const DEFAULT_CATCHUP_WINDOW_MS: u64 = 3_600_000;
/// Default `tz` of a `cron` schedule.
pub const DEFAULT_TZ: &str = "UTC";
/// Default `count` of a preview.
pub const DEFAULT_PREVIEW_COUNT: u32 = 10;
/// Largest `count` of a preview.
pub const MAX_PREVIEW_COUNT: u32 = 100;

/// `catchup`: which passed, unfired fire times (inside
/// `catchup_window_ms`) are enqueued when the server gets to them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum CatchupMode {
    /// Only the newest.
    #[default]
    Latest,
    /// Each, oldest first.
    All,
}

/// `overlap`: whether a fire enqueues while the previous fire's message is
/// still scheduled, ready or leased.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum OverlapMode {
    #[default]
    Allow,
    /// Enqueue nothing at that fire time (a dead previous message does not
    /// block).
    Skip,
}

// Read through `String` so that a wrong value's error names the field
// (serde's own says only "unknown variant").
impl TryFrom<String> for CatchupMode {
    type Error = String;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        match value.as_str() {
            "latest" => Ok(Self::Latest),
            "all" => Ok(Self::All),
            _ => Err(format!("catchup must be `latest` or `all`, got {value:?}")),
        }
    }
}

impl TryFrom<String> for OverlapMode {
    type Error = String;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        match value.as_str() {
            "allow" => Ok(Self::Allow),
            "skip" => Ok(Self::Skip),
            _ => Err(format!("overlap must be `allow` or `skip`, got {value:?}")),
        }
    }
}

/// `message` of a schedule `PUT`: what each fire enqueues, with the enqueue
/// rules (no `id`, no `delay_ms`/`deliver_at`: the schedule sets both).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, try_from = "ScheduleMessageWire")]
pub struct ScheduleMessageBody {
    /// Exactly one of `payload` (UTF-8, may be empty) and `payload_base64`.
    #[serde(flatten)]
    pub payload: Payload,
    /// Lower is delivered first; default 1024.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    /// Names starting with `delayd-` are refused.
    #[serde(
        default,
        deserialize_with = "nullable::or_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub headers: BTreeMap<String, String>,
    /// Overrides the queue's `max_attempts` for each fired message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// The flow key of each fired message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

crate::message::message_wire! {
    /// How a request carries a [`ScheduleMessageBody`]: the payload's keys as
    /// fields of their own, for the reason `EnqueueWire` gives.
    struct ScheduleMessageWire {
        @payload;
    }
}

impl TryFrom<ScheduleMessageWire> for ScheduleMessageBody {
    type Error = String;

    fn try_from(wire: ScheduleMessageWire) -> Result<Self, String> {
        Ok(Self {
            payload: Payload::from_keys(wire.payload, wire.payload_base64)?,
            priority: wire.priority,
            headers: wire.headers,
            max_attempts: wire.max_attempts,
            key: wire.key,
        })
    }
}

impl ScheduleMessageBody {
    /// A template with default priority and no headers.
    pub fn new(payload: impl Into<Payload>) -> Self {
        Self {
            payload: payload.into(),
            priority: None,
            headers: BTreeMap::new(),
            max_attempts: None,
            key: None,
        }
    }

    /// An empty payload with the defaults: the `message` of a `PUT` that
    /// gives none.
    pub fn empty() -> Self {
        Self::new("")
    }

    pub fn priority(mut self, priority: u32) -> Self {
        self.priority = Some(priority);
        self
    }

    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// The flow key of each fired message.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
}

/// `PUT /v1/queues/{queue}/schedules/{id}`: exactly one of `cron` and
/// `every_ms`; every other field takes its default when left out
/// (`message`: an empty payload; `start_at`: the time of the creating
/// request, or the current one on a replace).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SchedulePutBody {
    /// 5 fields (`minute hour day-of-month month day-of-week`), 6 with
    /// seconds first, or a macro (`@daily`, ...). Wall-clock time in `tz`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// Fire at `start_at + k * every_ms` (at least 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_ms: Option<u64>,
    /// IANA zone of `cron` (default `UTC`); not with `every_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    /// No fire before this epoch ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<u64>,
    /// No fire at or after this epoch ms; must be after `start_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<u64>,
    /// No fire after this many fires (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_fires: Option<u64>,
    /// What each fire enqueues; absent: an empty payload with the defaults.
    #[serde(default = "ScheduleMessageBody::empty")]
    pub message: ScheduleMessageBody,
    /// `latest` (default) or `all`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catchup: Option<CatchupMode>,
    /// Passed fire times older than this are missed (default 3600000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catchup_window_ms: Option<u64>,
    /// `allow` (default) or `skip`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<OverlapMode>,
    /// Each fire's `deliver_at` is its fire time plus `[0, jitter_ms)`
    /// (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<u64>,
    /// Default `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

impl SchedulePutBody {
    /// A schedule firing at the wall-clock times `expr` matches (in UTC
    /// unless [`tz`](Self::tz) says otherwise).
    pub fn cron(expr: impl Into<String>, message: ScheduleMessageBody) -> Self {
        Self {
            cron: Some(expr.into()),
            ..Self::with_message(message)
        }
    }

    /// A schedule firing every `every_ms` from its `start_at`.
    pub fn every_ms(every_ms: u64, message: ScheduleMessageBody) -> Self {
        Self {
            every_ms: Some(every_ms),
            ..Self::with_message(message)
        }
    }

    fn with_message(message: ScheduleMessageBody) -> Self {
        Self {
            cron: None,
            every_ms: None,
            tz: None,
            start_at: None,
            end_at: None,
            max_fires: None,
            message,
            catchup: None,
            catchup_window_ms: None,
            overlap: None,
            jitter_ms: None,
            paused: None,
        }
    }

    pub fn tz(mut self, tz: impl Into<String>) -> Self {
        self.tz = Some(tz.into());
        self
    }

    pub fn start_at(mut self, epoch_ms: u64) -> Self {
        self.start_at = Some(epoch_ms);
        self
    }

    pub fn end_at(mut self, epoch_ms: u64) -> Self {
        self.end_at = Some(epoch_ms);
        self
    }

    pub fn max_fires(mut self, max_fires: u64) -> Self {
        self.max_fires = Some(max_fires);
        self
    }

    pub fn catchup(mut self, catchup: CatchupMode) -> Self {
        self.catchup = Some(catchup);
        self
    }

    pub fn catchup_window_ms(mut self, window_ms: u64) -> Self {
        self.catchup_window_ms = Some(window_ms);
        self
    }

    pub fn overlap(mut self, overlap: OverlapMode) -> Self {
        self.overlap = Some(overlap);
        self
    }

    pub fn jitter_ms(mut self, jitter_ms: u64) -> Self {
        self.jitter_ms = Some(jitter_ms);
        self
    }

    pub fn paused(mut self, paused: bool) -> Self {
        self.paused = Some(paused);
        self
    }
}

/// The schedule object's `message`: the template as stored (priority filled
/// in; `max_attempts` only when it overrides the queue's, `key` only when
/// set).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScheduleMessage {
    #[serde(flatten)]
    pub payload: Payload,
    pub priority: u32,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// The schedule object (`PUT`, `GET`, pause, resume, the list): the
/// definition with its defaults filled in, and where the schedule stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Schedule {
    pub id: String,
    pub queue: String,
    /// Present for a cron schedule (with `tz`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    /// Present for an interval schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_ms: Option<u64>,
    pub start_at: u64,
    /// `null`: no end.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub end_at: Option<u64>,
    /// `null`: no limit.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub max_fires: Option<u64>,
    pub message: ScheduleMessage,
    /// `latest` or `all`.
    // Strings, not enums, in the answer: a client keeps reading schedules
    // with a mode a newer server adds.
    pub catchup: String,
    pub catchup_window_ms: u64,
    /// `allow` or `skip`.
    pub overlap: String,
    pub jitter_ms: u64,
    pub paused: bool,
    /// Increases with each change (replace, pause, resume).
    pub revision: u64,
    /// When the schedule was created or last changed (replace, pause,
    /// resume); fire times before it are never enqueued.
    pub updated_at: u64,
    /// Fire times enqueued so far (manual triggers and skipped or missed
    /// fire times do not count).
    pub fires: u64,
    /// The newest fire time enqueued; `null` before the first.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub last_fire_at: Option<u64>,
    /// The next fire time; `null` while paused or once finished.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub next_fire_at: Option<u64>,
    /// The next five fire times (fewer near `end_at` or `max_fires`; empty
    /// while paused or once finished).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub next_fires: Vec<u64>,
}

/// `GET /v1/queues/{queue}/schedules`: ordered by id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScheduleList {
    pub schedules: Vec<Schedule>,
}

/// `POST /v1/schedules/preview`: exactly one of `cron` and `every_ms`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PreviewBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_ms: Option<u64>,
    /// IANA zone of `cron` (default `UTC`); not with `every_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    /// Fire times at or after this epoch ms (default: now); anchors
    /// `every_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<u64>,
    /// 1..100, default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
}

/// The answer of a preview: fire times (epoch ms), oldest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Preview {
    pub fires: Vec<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn put_body_is_strict_and_sends_only_what_is_set() {
        let body = SchedulePutBody::cron("0 9 * * MON-FRI", ScheduleMessageBody::new("report"))
            .tz("Europe/Paris");
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({"cron": "0 9 * * MON-FRI", "tz": "Europe/Paris",
                   "message": {"payload": "report"}})
        );
        let typo = json!({"every_ms": 1000, "message": {"payload": ""}, "jiter_ms": 5});
        assert!(serde_json::from_value::<SchedulePutBody>(typo).is_err());
        let with_id = json!({"every_ms": 1000, "message": {"payload": "", "id": "x"}});
        assert!(serde_json::from_value::<SchedulePutBody>(with_id).is_err());
        let with_delay = json!({"every_ms": 1000, "message": {"payload": "", "delay_ms": 5}});
        assert!(serde_json::from_value::<SchedulePutBody>(with_delay).is_err());
        let bad_mode = json!({"every_ms": 1000, "message": {"payload": ""}, "catchup": "some"});
        assert!(serde_json::from_value::<SchedulePutBody>(bad_mode).is_err());
    }

    #[test]
    fn message_defaults_to_an_empty_payload() {
        let body: SchedulePutBody = serde_json::from_value(json!({"every_ms": 1000})).unwrap();
        assert_eq!(body.message, ScheduleMessageBody::new(""));
        let no_payload = json!({"every_ms": 1000, "message": {"priority": 1}});
        assert!(serde_json::from_value::<SchedulePutBody>(no_payload).is_err());
    }

    #[test]
    fn null_reads_as_absent() {
        let body: SchedulePutBody = serde_json::from_value(json!({
            "cron": "@daily", "every_ms": null, "end_at": null,
            "message": {"payload": "", "headers": null}
        }))
        .unwrap();
        assert_eq!(body.every_ms, None);
        assert_eq!(body.end_at, None);
        assert!(body.message.headers.is_empty());
    }

    #[test]
    fn schedule_object_tolerates_new_fields_and_modes() {
        let schedule: Schedule = serde_json::from_value(json!({
            "id": "s", "queue": "q", "every_ms": 1000, "start_at": 0, "end_at": null,
            "max_fires": null, "message": {"payload_base64": "/wA=", "priority": 1024,
            "headers": {}}, "catchup": "newer_mode", "catchup_window_ms": 1,
            "overlap": "allow", "jitter_ms": 0, "paused": false, "revision": 1, "updated_at": 0,
            "fires": 0,
            "last_fire_at": null, "next_fire_at": 0, "next_fires": [0], "added_later": 1
        }))
        .unwrap();
        assert_eq!(schedule.catchup, "newer_mode");
        assert_eq!(schedule.message.payload, Payload::Binary(vec![0xff, 0]));
    }
}
