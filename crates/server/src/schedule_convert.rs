//! Conversions between the schedule wire types (`delayd_api::schedule`) and
//! core's recurring-schedule types, both ways, field by field (the wire is a
//! compatibility promise; core is free to change).
//!
//! Requests get every check of api.md's schedule rules here, before the
//! broker is called, so a refused `PUT` changes nothing on any backend:
//! the shape rules (exactly one of `cron` and `every_ms`, `tz` only with
//! `cron`), the enqueue rules of the `message` template (payload size,
//! header names), and [`ScheduleDefinition::validate`] (the cron parses
//! and fires within 5 years, the zone exists, `every_ms >= 1000`, `end_at`
//! after `start_at`, `max_fires >= 1`). Every refusal names its field.

use delayd_api as api;
use delayd_api::{PreviewBody, ScheduleMessageBody, SchedulePutBody};
use delayd_core::{
    Catchup, EnqueueOutcome, MessageTemplate, Overlap, Recurrence, ScheduleDefinition,
    ScheduleRecord, DEFAULT_PRIORITY,
};

use crate::convert::{enqueue_request, Limits};
use crate::error::ApiError;

/// The definition a `PUT` of `body` at `limits.now_ms` stands for, defaults
/// filled in. `current_start_at` is the replaced schedule's `start_at`,
/// which a `PUT` without one keeps.
pub fn definition(
    body: SchedulePutBody,
    current_start_at: Option<u64>,
    limits: &Limits,
) -> Result<ScheduleDefinition, ApiError> {
    let recurrence = recurrence(body.cron, body.every_ms, body.tz)?;
    let jitter_ms = body.jitter_ms.unwrap_or(0);
    if jitter_ms > limits.max_delay_ms {
        return Err(ApiError::invalid_argument(format!(
            "jitter_ms: {jitter_ms} exceeds the maximum delay of {} ms",
            limits.max_delay_ms
        )));
    }
    let definition = ScheduleDefinition {
        recurrence,
        start_at: body.start_at.or(current_start_at).unwrap_or(limits.now_ms),
        end_at: body.end_at,
        max_fires: body.max_fires,
        message: template(body.message, limits)?,
        catchup: match body.catchup.unwrap_or_default() {
            api::CatchupMode::Latest => Catchup::Latest,
            api::CatchupMode::All => Catchup::All,
        },
        catchup_window_ms: body
            .catchup_window_ms
            .unwrap_or(api::schedule::DEFAULT_CATCHUP_WINDOW_MS),
        overlap: match body.overlap.unwrap_or_default() {
            api::OverlapMode::Allow => Overlap::Allow,
            api::OverlapMode::Skip => Overlap::Skip,
        },
        jitter_ms,
        paused: body.paused.unwrap_or(false),
    };
    definition.validate()?;
    Ok(definition)
}

/// Exactly one of `cron` and `every_ms`; `tz` (default `UTC`) only with
/// `cron`. The values themselves are checked by core's `validate`.
pub fn recurrence(
    cron: Option<String>,
    every_ms: Option<u64>,
    tz: Option<String>,
) -> Result<Recurrence, ApiError> {
    match (cron, every_ms) {
        (Some(_), Some(_)) => Err(ApiError::invalid_argument(
            "cron, every_ms: give exactly one of cron and every_ms, not both",
        )),
        (None, None) => Err(ApiError::invalid_argument(
            "cron, every_ms: give exactly one of cron and every_ms",
        )),
        (Some(expr), None) => Ok(Recurrence::Cron {
            expr,
            tz: tz.unwrap_or_else(|| api::schedule::DEFAULT_TZ.to_owned()),
        }),
        (None, Some(_)) if tz.is_some() => Err(ApiError::invalid_argument(
            "tz: only a cron schedule has a time zone (every_ms counts from start_at)",
        )),
        (None, Some(every_ms)) => Ok(Recurrence::Every { every_ms }),
    }
}

/// The template, through the enqueue checks (as a message without id and
/// delay). An unset priority is stored as the default 1024, so a `PUT`
/// that spells the default out equals one that leaves it out.
fn template(body: ScheduleMessageBody, limits: &Limits) -> Result<MessageTemplate, ApiError> {
    let as_enqueue = api::EnqueueBody {
        id: None,
        payload: body.payload,
        delay_ms: None,
        deliver_at: None,
        priority: body.priority,
        headers: body.headers,
        max_attempts: body.max_attempts,
        key: body.key,
        on_conflict: None,
        debounce_max_ms: None,
    };
    let request = enqueue_request(as_enqueue, limits).map_err(|err| ApiError {
        message: format!("message: {}", err.message),
        ..err
    })?;
    Ok(MessageTemplate {
        key: request.key,
        payload: request.payload,
        priority: Some(request.priority.unwrap_or(DEFAULT_PRIORITY)),
        headers: request.headers,
        max_attempts: request.max_attempts,
    })
}

/// `count` of a preview: 1..=100, default 10.
pub fn preview_count(body: &PreviewBody) -> Result<usize, ApiError> {
    let count = body.count.unwrap_or(api::schedule::DEFAULT_PREVIEW_COUNT);
    if !(1..=api::schedule::MAX_PREVIEW_COUNT).contains(&count) {
        return Err(ApiError::invalid_argument(format!(
            "count: must be 1..={}, got {count}",
            api::schedule::MAX_PREVIEW_COUNT
        )));
    }
    Ok(count as usize)
}

/// The schedule object of `record`.
pub fn schedule(record: ScheduleRecord) -> api::Schedule {
    let next_fires = record.next_fires();
    let definition = record.definition;
    let (cron, tz, every_ms) = match definition.recurrence {
        Recurrence::Cron { expr, tz } => (Some(expr), Some(tz), None),
        Recurrence::Every { every_ms } => (None, None, Some(every_ms)),
    };
    let message = definition.message;
    api::Schedule {
        id: record.id.to_string(),
        queue: record.queue.as_str().to_owned(),
        cron,
        tz,
        every_ms,
        start_at: definition.start_at,
        end_at: definition.end_at,
        max_fires: definition.max_fires,
        message: api::ScheduleMessage {
            payload: api::Payload::from_bytes(message.payload),
            priority: message.priority.unwrap_or(DEFAULT_PRIORITY),
            headers: message.headers,
            max_attempts: message.max_attempts,
            key: message.key.map(String::from),
        },
        catchup: match definition.catchup {
            Catchup::Latest => "latest",
            Catchup::All => "all",
        }
        .to_owned(),
        catchup_window_ms: definition.catchup_window_ms,
        overlap: match definition.overlap {
            Overlap::Allow => "allow",
            Overlap::Skip => "skip",
        }
        .to_owned(),
        jitter_ms: definition.jitter_ms,
        paused: definition.paused,
        revision: record.revision,
        updated_at: record.since,
        fires: record.fires,
        last_fire_at: record.last_fire_at,
        next_fire_at: record.next_fire_at,
        next_fires,
    }
}

/// The answer of a manual trigger.
pub fn triggered(outcome: EnqueueOutcome) -> api::Enqueued {
    crate::convert::enqueued(outcome)
}
