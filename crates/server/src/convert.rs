//! Conversions between wire types (`delayd_api`) and core types, both
//! ways, written out field by field: the wire is a compatibility promise
//! and the core model is free to change, so neither is derived from the
//! other.
//!
//! Requests: every check api.md asks of a body that neither serde nor the
//! core types already enforce (payload size, delay limits, header names,
//! push allowlist). Everything here runs before the broker is called, so a
//! refused request changes nothing. (Exactly one of `payload` and
//! `payload_base64`, and valid base64, are checked while the body is read,
//! by `delayd_api::Payload`.)

use std::collections::BTreeMap;

use axum::http::{HeaderName, HeaderValue};
use delayd_api as api;
use delayd_api::{EnqueueBody, FlowBody, PushBody, QueuePutBody, RateBody, RetryBody};
use delayd_core::flow::MAX_RATE_LIMIT;
use delayd_core::{
    Delivery, EnqueueOutcome, EnqueueRequest, Event, EventKind, FlowConfig, FlowKey, History,
    KeyInfo, Message, MessageId, OnConflict, PushConfig, QueueConfigPatch, QueueInfo, Rate,
    RetryPolicy, Schedule,
};

use crate::error::ApiError;
use delayd_push::{credentials, PushPolicy};

/// The limits a request is checked against, with the wall time to check
/// `deliver_at` by.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_payload: usize,
    pub max_delay_ms: u64,
    pub now_ms: u64,
}

/// `delay_ms` xor `deliver_at` (or neither: `None`), within the max delay.
pub fn schedule(
    delay_ms: Option<u64>,
    deliver_at: Option<u64>,
    limits: &Limits,
) -> Result<Option<Schedule>, ApiError> {
    match (delay_ms, deliver_at) {
        (Some(_), Some(_)) => Err(ApiError::invalid_argument(
            "give either delay_ms or deliver_at, not both",
        )),
        (Some(delay), None) => {
            check_delay(delay, limits.max_delay_ms)?;
            Ok(Some(Schedule::Delay(delay)))
        }
        (None, Some(at)) => {
            check_delay(at.saturating_sub(limits.now_ms), limits.max_delay_ms)?;
            Ok(Some(Schedule::At(at)))
        }
        (None, None) => Ok(None),
    }
}

pub fn check_delay(delay_ms: u64, max_delay_ms: u64) -> Result<(), ApiError> {
    if delay_ms > max_delay_ms {
        return Err(ApiError::invalid_argument(format!(
            "delay of {delay_ms} ms exceeds the maximum of {max_delay_ms} ms"
        )));
    }
    Ok(())
}

/// An enqueue body (or batch item) as core's request, checked by core's
/// item rules too (`EnqueueRequest::validate`: `debounce_max_ms` only with
/// debounce, `replace` and `debounce` only with an id), so a refused item
/// never reaches the broker whatever the backend.
pub fn enqueue_request(body: EnqueueBody, limits: &Limits) -> Result<EnqueueRequest, ApiError> {
    let payload = payload_bytes(body.payload, limits.max_payload)?;
    let id = body.id.map(MessageId::new).transpose()?;
    let schedule = schedule(body.delay_ms, body.deliver_at, limits)?.unwrap_or_default();
    let headers = headers(body.headers)?;
    let key = body.key.map(flow_key).transpose()?;
    let request = EnqueueRequest {
        key,
        id,
        schedule,
        priority: body.priority,
        headers,
        payload,
        max_attempts: body.max_attempts,
        lease_ms: None,
        on_conflict: body.on_conflict.map(on_conflict).unwrap_or_default(),
        debounce_max_ms: body.debounce_max_ms,
    };
    request.validate()?;
    Ok(request)
}

fn on_conflict(wire: api::OnConflict) -> OnConflict {
    match wire {
        api::OnConflict::Keep => OnConflict::Keep,
        api::OnConflict::Replace => OnConflict::Replace,
        api::OnConflict::Debounce => OnConflict::Debounce,
    }
}

/// A flow key from a body or a path: core's rule, whose error names `key`.
pub fn flow_key(key: String) -> Result<FlowKey, ApiError> {
    Ok(FlowKey::new(key)?)
}

fn payload_bytes(payload: api::Payload, max_payload: usize) -> Result<Vec<u8>, ApiError> {
    let bytes = payload.into_bytes();
    if bytes.len() > max_payload {
        return Err(ApiError::payload_too_large(format!(
            "payload of {} bytes exceeds the maximum of {max_payload} bytes",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// Headers are forwarded on push, so they must be valid HTTP headers, and
/// they cannot shadow delayd's own `delayd-*` headers.
fn headers(headers: BTreeMap<String, String>) -> Result<BTreeMap<String, String>, ApiError> {
    for (name, value) in &headers {
        // Bytes, not `&name[..7]`: a name may hold multi-byte characters.
        let reserved = name
            .as_bytes()
            .get(..7)
            .is_some_and(|prefix| prefix.eq_ignore_ascii_case(b"delayd-"));
        if reserved {
            return Err(ApiError::invalid_argument(format!(
                "header {name:?}: names starting with delayd- are reserved"
            )));
        }
        if HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(ApiError::invalid_argument(format!(
                "header {name:?} is not a valid HTTP header name"
            )));
        }
        if HeaderValue::from_str(value).is_err() {
            return Err(ApiError::invalid_argument(format!(
                "header {name:?} has a value that is not a valid HTTP header value"
            )));
        }
    }
    Ok(headers)
}

/// A lease duration from a body (lease, extend, queue config): at least
/// 1 ms and at most `--max-delay`, so that a message whose consumer died
/// comes back within the longest time any message may wait to be due.
pub fn check_lease_ms(lease_ms: Option<u64>, max_delay_ms: u64) -> Result<(), ApiError> {
    match lease_ms {
        Some(0) => Err(ApiError::invalid_argument("lease_ms must be at least 1")),
        Some(ms) if ms > max_delay_ms => Err(ApiError::invalid_argument(format!(
            "lease_ms of {ms} ms exceeds the maximum of {max_delay_ms} ms"
        ))),
        _ => Ok(()),
    }
}

pub fn queue_patch(
    body: QueuePutBody,
    allow: &PushPolicy,
    max_delay_ms: u64,
) -> Result<QueueConfigPatch, ApiError> {
    check_lease_ms(body.lease_ms, max_delay_ms)?;
    // Core reads 0 as "never dead-letter" (the beanstalkd listener's
    // queues); over HTTP, as for enqueue, a message must be attemptable.
    if body.max_attempts == Some(0) {
        return Err(ApiError::invalid_argument(
            "max_attempts must be at least 1",
        ));
    }
    let retry = body.retry.map(retry_policy).transpose()?;
    let push = match body.push {
        None => None,
        Some(None) => Some(None),
        Some(Some(push)) => Some(Some(push_config(push, allow)?)),
    };
    let flow = match body.flow {
        None => None,
        Some(None) => Some(None),
        Some(Some(flow)) => Some(Some(flow_config(flow)?)),
    };
    Ok(QueueConfigPatch {
        flow,
        lease_ms: body.lease_ms,
        max_attempts: body.max_attempts,
        retry,
        push,
        // Its range (at most 30 days) is core's `QueueConfig::validate`,
        // which names `retain_ms`; the broker checks it before storing.
        retain_ms: body.retain_ms,
    })
}

/// Fields the body left out already hold api.md's defaults (the test
/// below checks they are core's).
fn retry_policy(body: RetryBody) -> Result<RetryPolicy, ApiError> {
    let policy = RetryPolicy {
        initial_ms: body.initial_ms,
        max_ms: body.max_ms,
        multiplier: body.multiplier,
    };
    if policy.initial_ms == 0 {
        return Err(ApiError::invalid_argument(
            "retry.initial_ms must be at least 1",
        ));
    }
    policy.validate()?;
    Ok(policy)
}

/// `flow` as a `PUT` gives it, with api.md's defaults for what it leaves
/// out; core's `FlowConfig::validate` names the field of any other rule.
fn flow_config(body: FlowBody) -> Result<FlowConfig, ApiError> {
    let flow = FlowConfig {
        rate: body
            .rate
            .map(|rate| rate_config(rate, "rate"))
            .transpose()?,
        key_rate: body
            .key_rate
            .map(|rate| rate_config(rate, "key_rate"))
            .transpose()?,
        concurrency: body.concurrency,
        key_concurrency: body.key_concurrency,
        ordered: body.ordered.unwrap_or(false),
        max_deferrals: body
            .max_deferrals
            .unwrap_or(FlowConfig::DEFAULT_MAX_DEFERRALS),
    };
    flow.validate()?;
    Ok(flow)
}

/// The wire's `limit` is wider than core's (so that any integer gets the
/// range rule's message); narrowed here.
fn rate_config(body: RateBody, field: &str) -> Result<Rate, ApiError> {
    let limit = u32::try_from(body.limit)
        .ok()
        .filter(|&limit| limit <= MAX_RATE_LIMIT)
        .ok_or_else(|| {
            ApiError::invalid_argument(format!(
                "flow.{field}.limit must be within 1..={MAX_RATE_LIMIT}, got {}",
                body.limit
            ))
        })?;
    Ok(Rate {
        limit,
        period_ms: body.period_ms,
        burst: body
            .burst
            .unwrap_or_else(|| Rate::default_burst(limit, body.period_ms)),
    })
}

fn push_config(body: PushBody, allow: &PushPolicy) -> Result<PushConfig, ApiError> {
    allow
        .check_url(&body.url)
        .map_err(|err| ApiError::invalid_argument(format!("push.url: {err}")))?;
    credentials::check_url_userinfo(&body.url)
        .map_err(|err| ApiError::invalid_argument(err.to_string()))?;
    let headers = body.headers.unwrap_or_default();
    credentials::header_map(&headers).map_err(|err| ApiError::invalid_argument(err.to_string()))?;
    let config = PushConfig {
        url: body.url,
        timeout_ms: body.timeout_ms.unwrap_or(PushConfig::DEFAULT_TIMEOUT_MS),
        concurrency: body.concurrency.unwrap_or(PushConfig::DEFAULT_CONCURRENCY),
        secret: body.secret,
        headers,
    };
    if config.timeout_ms == 0 || config.concurrency == 0 {
        return Err(ApiError::invalid_argument(
            "push.timeout_ms and push.concurrency must be at least 1",
        ));
    }
    Ok(config)
}

// ----- core to wire -----

pub fn queue(info: QueueInfo) -> api::Queue {
    let config = info.config;
    api::Queue {
        name: info.name.as_str().to_owned(),
        config: api::QueueConfig {
            lease_ms: config.lease_ms,
            max_attempts: config.max_attempts,
            retry: api::RetryPolicy {
                initial_ms: config.retry.initial_ms,
                max_ms: config.retry.max_ms,
                multiplier: config.retry.multiplier,
            },
            push: config.push.map(push_view),
            flow: config.flow.map(flow_view),
            retain_ms: config.retain_ms,
        },
        paused: info.paused,
        paused_until: info.paused_until.filter(|_| info.paused),
        stats: api::QueueStats {
            scheduled: info.stats.scheduled,
            ready: info.stats.ready,
            leased: info.stats.leased,
            dead: info.stats.dead,
            flow_keys: info.stats.flow_keys,
            cooling_keys: info.stats.cooling_keys,
        },
    }
}

fn flow_view(flow: FlowConfig) -> api::FlowView {
    api::FlowView {
        rate: flow.rate.map(rate_view),
        key_rate: flow.key_rate.map(rate_view),
        concurrency: flow.concurrency,
        key_concurrency: flow.key_concurrency,
        ordered: flow.ordered,
        max_deferrals: flow.max_deferrals,
    }
}

fn rate_view(rate: Rate) -> api::RateView {
    api::RateView {
        limit: u64::from(rate.limit),
        period_ms: rate.period_ms,
        burst: rate.burst,
    }
}

pub fn key_info(info: KeyInfo) -> api::KeyInfo {
    api::KeyInfo {
        key: info.key.into(),
        scheduled: info.scheduled,
        ready: info.ready,
        leased: info.leased,
        dead: info.dead,
        cooling_until: info.cooling_until,
    }
}

/// The secret never goes back out; only whether one is set.
fn push_view(push: PushConfig) -> api::PushView {
    api::PushView {
        url: push.url,
        timeout_ms: push.timeout_ms,
        concurrency: push.concurrency,
        secret_set: push.secret.is_some(),
        headers_set: push.headers.into_keys().collect(),
    }
}

pub fn enqueued(outcome: EnqueueOutcome) -> api::Enqueued {
    api::Enqueued {
        id: outcome.id.as_str().to_owned(),
        seq: outcome.seq,
        deliver_at: outcome.deliver_at,
        created: outcome.created,
        replaced: outcome.replaced,
        after_lease: outcome.after_lease,
    }
}

pub fn message(message: Message) -> api::Message {
    api::Message {
        id: message.id.as_str().to_owned(),
        seq: message.seq,
        queue: message.queue.as_str().to_owned(),
        state: message.state.as_str().to_owned(),
        deliver_at: message.deliver_at,
        attempts: message.attempts,
        priority: message.priority,
        headers: message.headers,
        payload: api::Payload::from_bytes(message.payload),
        enqueued_at: message.enqueued_at,
        key: message.key.map(String::from),
        deferrals: message.deferrals,
        max_attempts: message.max_attempts,
        lease_until: message.lease_until,
        died_at: message.died_at,
        last_error: message.last_error,
        ended_at: message.ended_at,
    }
}

/// A message's history, event by event (api.md, "Message history").
pub fn history(history: History) -> api::History {
    api::History {
        events: history.events.into_iter().map(event).collect(),
        dropped: history.dropped,
    }
}

fn event(event: Event) -> api::Event {
    use api::EventKind as Wire;
    let kind = match event.kind {
        EventKind::Enqueued => Wire::Enqueued,
        EventKind::Replaced { after_lease } => Wire::Replaced { after_lease },
        EventKind::Rescheduled => Wire::Rescheduled,
        EventKind::Leased { lease_until, via } => Wire::Leased {
            lease_until,
            via: via.as_str().to_owned(),
        },
        EventKind::Acked => Wire::Acked,
        EventKind::Nacked { delay_ms, error } => Wire::Nacked { delay_ms, error },
        EventKind::Deferred { until, reason } => Wire::Deferred {
            until,
            reason: reason.as_str().to_owned(),
        },
        EventKind::Expired => Wire::Expired,
        EventKind::PushFailed {
            status,
            error,
            duration_ms,
        } => Wire::PushFailed {
            status,
            error,
            duration_ms,
        },
        EventKind::Dead { reason } => Wire::Dead {
            reason: reason.as_str().to_owned(),
        },
        EventKind::Redriven => Wire::Redriven,
        EventKind::Cancelled => Wire::Cancelled,
    };
    api::Event {
        at: event.at,
        attempt: event.attempt,
        kind,
    }
}

pub fn leased(delivery: Delivery) -> api::Leased {
    api::Leased {
        id: delivery.id.as_str().to_owned(),
        seq: delivery.seq,
        lease_id: delivery.lease_id.as_str().to_owned(),
        lease_until: delivery.lease_until,
        attempt: delivery.attempt,
        deliver_at: delivery.deliver_at,
        priority: delivery.priority,
        headers: delivery.headers,
        payload: api::Payload::from_bytes(delivery.payload),
        key: delivery.key.map(String::from),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wire crate fills in api.md's retry defaults for fields a body
    /// leaves out; they must be core's defaults.
    #[test]
    fn wire_flow_defaults_are_core_defaults() {
        assert_eq!(
            api::flow::DEFAULT_MAX_DEFERRALS,
            FlowConfig::DEFAULT_MAX_DEFERRALS
        );
        let flow = flow_config(FlowBody::default()).unwrap();
        assert_eq!(flow, FlowConfig::default());
    }

    #[test]
    fn rate_limit_beyond_u32_names_the_field() {
        let body = FlowBody {
            key_rate: Some(RateBody::new(u64::from(u32::MAX) + 1, 1000)),
            ..FlowBody::default()
        };
        let err = flow_config(body).unwrap_err();
        assert!(err.body().error.message.contains("flow.key_rate.limit"));
    }

    /// The wire crate's copy of the longest `retain_ms` (for the OpenAPI
    /// document) is core's rule.
    #[test]
    fn wire_retain_max_is_core_max() {
        assert_eq!(
            api::queue::MAX_RETAIN_MS,
            delayd_core::QueueConfig::MAX_RETAIN_MS
        );
    }

    #[test]
    fn wire_retry_defaults_are_core_defaults() {
        let wire = RetryBody::default();
        let core = RetryPolicy::default();
        assert_eq!(
            (wire.initial_ms, wire.max_ms, wire.multiplier),
            (core.initial_ms, core.max_ms, core.multiplier)
        );
    }
}
