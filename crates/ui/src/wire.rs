//! The JSON bodies of the dashboard's endpoints. Message objects are exactly
//! those of `GET /v1/queues/{queue}/messages/{id}` (api.md), so the
//! dashboard renders one shape whichever endpoint it came from.

use std::collections::BTreeMap;

use base64::Engine as _;
use delayd_core::{DueHistogram, Message};
use serde::Serialize;

/// `GET /v1/queues/{queue}/histogram`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HistogramDto {
    pub from: u64,
    pub to: u64,
    /// Width of each bucket; bucket `i` covers
    /// `[from + i * bucket_ms, from + (i + 1) * bucket_ms)`.
    pub bucket_ms: u64,
    pub counts: Vec<u64>,
    /// The broker stopped counting early: the counts are a lower bound.
    pub truncated: bool,
}

impl HistogramDto {
    pub fn new(from: u64, to: u64, bucket_ms: u64, histogram: DueHistogram) -> Self {
        Self {
            from,
            to,
            bucket_ms,
            counts: histogram.counts,
            truncated: histogram.truncated,
        }
    }
}

/// One message, as api.md's `GET /v1/queues/{queue}/messages/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MessageDto {
    pub id: String,
    pub seq: u64,
    pub queue: String,
    pub state: &'static str,
    pub deliver_at: u64,
    pub attempts: u32,
    pub priority: u32,
    pub headers: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_base64: Option<String>,
    pub enqueued_at: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_until: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub died_at: Option<u64>,
}

impl From<Message> for MessageDto {
    fn from(message: Message) -> Self {
        // api.md: `payload` when the bytes are UTF-8, else `payload_base64`.
        let (payload, payload_base64) = match String::from_utf8(message.payload) {
            Ok(text) => (Some(text), None),
            Err(err) => (
                None,
                Some(base64::engine::general_purpose::STANDARD.encode(err.into_bytes())),
            ),
        };
        Self {
            id: message.id.as_str().to_owned(),
            seq: message.seq,
            queue: message.queue.as_str().to_owned(),
            state: message.state.as_str(),
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

/// `GET /v1/queues/{queue}/messages?state=...`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MessageList {
    pub messages: Vec<MessageDto>,
}

/// api.md's error body: `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize)]
pub struct ErrorDetail {
    pub code: &'static str,
    pub message: String,
}
