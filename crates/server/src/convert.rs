//! Request DTOs to core requests: every check api.md asks of a body that the
//! core types do not already enforce (payload kinds and size, delay limits,
//! header names, push allowlist). Everything here runs before the broker is
//! called, so a refused request changes nothing.

use std::collections::BTreeMap;

use axum::http::{HeaderName, HeaderValue};
use base64::Engine as _;
use delayd_core::{EnqueueRequest, MessageId, PushConfig, QueueConfigPatch, RetryPolicy, Schedule};

use crate::error::ApiError;
use crate::wire::{EnqueueBody, PushBody, QueuePutBody, RetryBody};
use delayd_push::PushPolicy;

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

pub fn enqueue_request(body: EnqueueBody, limits: &Limits) -> Result<EnqueueRequest, ApiError> {
    let payload = payload_bytes(body.payload, body.payload_base64, limits.max_payload)?;
    let id = body.id.map(MessageId::new).transpose()?;
    let schedule = schedule(body.delay_ms, body.deliver_at, limits)?.unwrap_or_default();
    let headers = headers(body.headers.unwrap_or_default())?;
    Ok(EnqueueRequest {
        id,
        schedule,
        priority: body.priority,
        headers,
        payload,
        max_attempts: body.max_attempts,
        lease_ms: None,
    })
}

fn payload_bytes(
    text: Option<String>,
    base64: Option<String>,
    max_payload: usize,
) -> Result<Vec<u8>, ApiError> {
    let bytes = match (text, base64) {
        (Some(text), None) => text.into_bytes(),
        (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
            .decode(encoded.as_bytes())
            .map_err(|err| ApiError::invalid_argument(format!("payload_base64: {err}")))?,
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid_argument(
                "give either payload or payload_base64, not both",
            ))
        }
        (None, None) => {
            return Err(ApiError::invalid_argument(
                "payload or payload_base64 is required",
            ))
        }
    };
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
        if name.len() >= 7 && name[..7].eq_ignore_ascii_case("delayd-") {
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

pub fn queue_patch(body: QueuePutBody, allow: &PushPolicy) -> Result<QueueConfigPatch, ApiError> {
    if body.lease_ms == Some(0) {
        return Err(ApiError::invalid_argument("lease_ms must be at least 1"));
    }
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
    Ok(QueueConfigPatch {
        lease_ms: body.lease_ms,
        max_attempts: body.max_attempts,
        retry,
        push,
    })
}

fn retry_policy(body: RetryBody) -> Result<RetryPolicy, ApiError> {
    let defaults = RetryPolicy::default();
    let policy = RetryPolicy {
        initial_ms: body.initial_ms.unwrap_or(defaults.initial_ms),
        max_ms: body.max_ms.unwrap_or(defaults.max_ms),
        multiplier: body.multiplier.unwrap_or(defaults.multiplier),
    };
    if policy.initial_ms == 0 {
        return Err(ApiError::invalid_argument(
            "retry.initial_ms must be at least 1",
        ));
    }
    policy.validate()?;
    Ok(policy)
}

fn push_config(body: PushBody, allow: &PushPolicy) -> Result<PushConfig, ApiError> {
    allow
        .check_url(&body.url)
        .map_err(|err| ApiError::invalid_argument(format!("push.url: {err}")))?;
    let config = PushConfig {
        url: body.url,
        timeout_ms: body.timeout_ms.unwrap_or(PushConfig::DEFAULT_TIMEOUT_MS),
        concurrency: body.concurrency.unwrap_or(PushConfig::DEFAULT_CONCURRENCY),
        secret: body.secret,
    };
    if config.timeout_ms == 0 || config.concurrency == 0 {
        return Err(ApiError::invalid_argument(
            "push.timeout_ms and push.concurrency must be at least 1",
        ));
    }
    Ok(config)
}
