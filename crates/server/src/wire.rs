//! Wire DTOs: the JSON shapes of api.md, separate from core types and
//! converted explicitly, because the wire is a compatibility promise and the
//! core model is free to change.
//!
//! Request bodies deny unknown fields (a typo like `dealy_ms` must be a 400,
//! never "deliver now") and use unsigned integer types, so fractions,
//! negatives and strings are rejected by serde itself.

use std::collections::BTreeMap;

use delayd_core::{Delivery, EnqueueOutcome, Message, PushConfig, QueueInfo};
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

use crate::error::ErrorBody;

// ----- queues -----

/// `PUT /v1/queues/{queue}`: every field optional; absent fields keep their
/// value, `retry` and `push` are replaced whole, `push: null` removes push.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueuePutBody {
    pub lease_ms: Option<u64>,
    pub max_attempts: Option<u32>,
    pub retry: Option<RetryBody>,
    #[serde(default, deserialize_with = "present_or_null")]
    #[schema(value_type = Option<PushBody>)]
    pub push: Option<Option<PushBody>>,
}

/// Distinguishes `"push": null` (Some(None)) from an absent field (None).
fn present_or_null<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// Retry backoff; fields left out take their defaults (1000, 3600000, 2.0).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryBody {
    pub initial_ms: Option<u64>,
    pub max_ms: Option<u64>,
    /// A number >= 1.0 (the only non-integer number of the API).
    pub multiplier: Option<f64>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PushBody {
    pub url: String,
    /// Default 10000.
    pub timeout_ms: Option<u64>,
    /// Maximum push requests in flight for the queue; default 16.
    pub concurrency: Option<u32>,
    /// HMAC-SHA256 key for `delayd-signature`; never returned.
    pub secret: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct QueueDto {
    pub name: String,
    pub config: QueueConfigDto,
    pub paused: bool,
    /// Set while a timed pause (beanstalkd `pause-tube`) lasts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused_until: Option<u64>,
    pub stats: StatsDto,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct QueueConfigDto {
    pub lease_ms: u64,
    pub max_attempts: u32,
    pub retry: RetryDto,
    pub push: Option<PushDto>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RetryDto {
    pub initial_ms: u64,
    pub max_ms: u64,
    pub multiplier: f64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PushDto {
    pub url: String,
    pub timeout_ms: u64,
    pub concurrency: u32,
    /// Whether a signing secret is configured (the secret itself is never
    /// returned).
    pub secret_set: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StatsDto {
    pub scheduled: u64,
    pub ready: u64,
    pub leased: u64,
    pub dead: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct QueueList {
    pub queues: Vec<QueueDto>,
}

impl From<QueueInfo> for QueueDto {
    fn from(info: QueueInfo) -> Self {
        let config = info.config;
        Self {
            name: info.name.as_str().to_owned(),
            config: QueueConfigDto {
                lease_ms: config.lease_ms,
                max_attempts: config.max_attempts,
                retry: RetryDto {
                    initial_ms: config.retry.initial_ms,
                    max_ms: config.retry.max_ms,
                    multiplier: config.retry.multiplier,
                },
                push: config.push.map(PushDto::from),
            },
            paused: info.paused,
            paused_until: info.paused_until.filter(|_| info.paused),
            stats: StatsDto {
                scheduled: info.stats.scheduled,
                ready: info.stats.ready,
                leased: info.stats.leased,
                dead: info.stats.dead,
            },
        }
    }
}

impl From<PushConfig> for PushDto {
    fn from(push: PushConfig) -> Self {
        Self {
            url: push.url,
            timeout_ms: push.timeout_ms,
            concurrency: push.concurrency,
            secret_set: push.secret.is_some(),
        }
    }
}

// ----- messages -----

/// One message to enqueue (alone, or as an item of a batch).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnqueueBody {
    /// Idempotency key `[A-Za-z0-9._:-]{1,256}`; generated when absent.
    pub id: Option<String>,
    /// UTF-8 payload (may be empty). Exactly one of `payload` and
    /// `payload_base64` is required.
    pub payload: Option<String>,
    /// Standard base64 (with padding) of a binary payload.
    pub payload_base64: Option<String>,
    /// Deliver this many ms from now. Not together with `deliver_at`.
    pub delay_ms: Option<u64>,
    /// Deliver at this epoch ms; in the past means now.
    pub deliver_at: Option<u64>,
    /// Lower is delivered first; default 1024.
    pub priority: Option<u32>,
    /// Forwarded to push targets; names starting with `delayd-` are refused.
    pub headers: Option<BTreeMap<String, String>>,
    /// Overrides the queue's `max_attempts` for this message.
    pub max_attempts: Option<u32>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchBody {
    /// Up to 1000 items; each is validated on its own.
    #[schema(value_type = Vec<EnqueueBody>)]
    pub messages: Vec<serde_json::Value>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EnqueueResult {
    pub id: String,
    pub seq: u64,
    pub deliver_at: u64,
    /// False when a live message with this id already existed (nothing
    /// changed).
    pub created: bool,
}

impl From<EnqueueOutcome> for EnqueueResult {
    fn from(outcome: EnqueueOutcome) -> Self {
        Self {
            id: outcome.id.as_str().to_owned(),
            seq: outcome.seq,
            deliver_at: outcome.deliver_at,
            created: outcome.created,
        }
    }
}

/// One batch result: the outcome or the item's own error.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum BatchItemResult {
    Enqueued(EnqueueResult),
    Failed(ErrorBody),
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchResults {
    pub results: Vec<BatchItemResult>,
}

/// `PATCH` of a scheduled or ready message.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchBody {
    pub delay_ms: Option<u64>,
    pub deliver_at: Option<u64>,
    pub priority: Option<u32>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MessageDto {
    pub id: String,
    pub seq: u64,
    pub queue: String,
    /// `scheduled`, `ready`, `leased` or `dead`.
    pub state: String,
    pub deliver_at: u64,
    pub attempts: u32,
    pub priority: u32,
    pub headers: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_base64: Option<String>,
    pub enqueued_at: u64,
    /// The message's own `max_attempts`, when it overrides the queue's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// While leased.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_until: Option<u64>,
    /// While dead: when it died.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub died_at: Option<u64>,
}

/// `payload` when the bytes are UTF-8, else `payload_base64`.
fn split_payload(bytes: Vec<u8>) -> (Option<String>, Option<String>) {
    use base64::Engine as _;
    match String::from_utf8(bytes) {
        Ok(text) => (Some(text), None),
        Err(err) => {
            let encoded = base64::engine::general_purpose::STANDARD.encode(err.as_bytes());
            (None, Some(encoded))
        }
    }
}

impl From<Message> for MessageDto {
    fn from(message: Message) -> Self {
        let (payload, payload_base64) = split_payload(message.payload);
        Self {
            id: message.id.as_str().to_owned(),
            seq: message.seq,
            queue: message.queue.as_str().to_owned(),
            state: message.state.as_str().to_owned(),
            deliver_at: message.deliver_at,
            attempts: message.attempts,
            priority: message.priority,
            headers: message.headers,
            payload,
            payload_base64,
            enqueued_at: message.enqueued_at,
            max_attempts: message.max_attempts,
            lease_until: message.lease_until,
            died_at: message.died_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MessageList {
    pub messages: Vec<MessageDto>,
}

// ----- consuming -----

/// An empty body means all defaults.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaseBody {
    /// 1..=1000, default 1.
    pub max: Option<u32>,
    /// 0..=60000, default 0.
    pub wait_ms: Option<u64>,
    /// Default: the message's, else the queue's `lease_ms`.
    pub lease_ms: Option<u64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LeasedMessage {
    pub id: String,
    pub seq: u64,
    pub lease_id: String,
    pub lease_until: u64,
    /// 1 for the first delivery.
    pub attempt: u32,
    pub deliver_at: u64,
    pub priority: u32,
    pub headers: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_base64: Option<String>,
}

impl From<Delivery> for LeasedMessage {
    fn from(delivery: Delivery) -> Self {
        let (payload, payload_base64) = split_payload(delivery.payload);
        Self {
            id: delivery.id.as_str().to_owned(),
            seq: delivery.seq,
            lease_id: delivery.lease_id.as_str().to_owned(),
            lease_until: delivery.lease_until,
            attempt: delivery.attempt,
            deliver_at: delivery.deliver_at,
            priority: delivery.priority,
            headers: delivery.headers,
            payload,
            payload_base64,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LeaseResponse {
    pub messages: Vec<LeasedMessage>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AckBody {
    pub lease_id: String,
}

/// `POST /v1/queues/{queue}/acks`: up to 1000 acks, each as the single
/// ack would be.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcksBody {
    pub acks: Vec<AckItem>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AckItem {
    pub id: String,
    pub lease_id: String,
}

/// One ack's outcome: `acked: true`, or the error the single ack would
/// have answered.
#[derive(Debug, Serialize, ToSchema)]
pub struct AckResult {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acked: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<crate::error::ErrorDetail>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AckResults {
    pub results: Vec<AckResult>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NackBody {
    pub lease_id: String,
    /// Retry after this long; default: the queue's backoff.
    pub delay_ms: Option<u64>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtendBody {
    pub lease_id: String,
    /// Default: the message's, else the queue's `lease_ms`.
    pub lease_ms: Option<u64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ExtendResponse {
    pub lease_until: u64,
}

// ----- dead letters -----

#[derive(Debug, Default, Deserialize, ToSchema, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeadQuery {
    /// 1..=1000, default 100.
    pub limit: Option<u32>,
    /// The id of the last message of the previous page.
    pub after: Option<String>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedriveBody {
    /// Only these ids (ids that are not dead are ignored); all dead
    /// messages when absent.
    pub ids: Option<Vec<String>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RedriveResponse {
    pub redriven: u64,
}

// ----- operations -----

#[derive(Debug, Serialize, ToSchema)]
pub struct StatusBody {
    pub status: String,
}
