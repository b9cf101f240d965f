//! Wire types: serde structs mirroring /work/shared/api.md field for field.
//!
//! Request bodies are serialized exactly as api.md spells them, with absent
//! optional fields left out (the server rejects unknown fields, and an
//! explicit `null` is not the same as "absent" for `push`). Response types
//! ignore fields they do not know, so a newer server that adds fields keeps
//! working with this client.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// A message body: api.md carries it as `payload` (UTF-8 text) or
/// `payload_base64` (any bytes). Flattened into the surrounding object, so
/// exactly one of the two keys appears.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Payload {
    #[serde(rename = "payload")]
    Text(String),
    #[serde(rename = "payload_base64", with = "base64_bytes")]
    Binary(Vec<u8>),
}

impl Payload {
    /// Text when `bytes` are valid UTF-8 (readable on the wire), else base64.
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        match String::from_utf8(bytes) {
            Ok(text) => Self::Text(text),
            Err(err) => Self::Binary(err.into_bytes()),
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Text(text) => text.as_bytes(),
            Self::Binary(bytes) => bytes,
        }
    }

    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            Self::Text(text) => text.into_bytes(),
            Self::Binary(bytes) => bytes,
        }
    }
}

impl From<&str> for Payload {
    fn from(text: &str) -> Self {
        Self::Text(text.to_owned())
    }
}

impl From<String> for Payload {
    fn from(text: String) -> Self {
        Self::Text(text)
    }
}

impl From<Vec<u8>> for Payload {
    fn from(bytes: Vec<u8>) -> Self {
        Self::from_bytes(bytes)
    }
}

mod base64_bytes {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD
            .decode(text.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}

/// Encodes bytes the way `payload_base64` expects (standard alphabet, padded).
pub fn encode_base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

// ----- errors -----

/// `{"error": {"code", "message"}}`, the body of every error answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

// ----- queues -----

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Retry {
    pub initial_ms: u64,
    pub max_ms: u64,
    pub multiplier: f64,
}

/// `push` as sent in a `PUT` body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushSpec {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// Body of `PUT /v1/queues/{queue}`: every field optional, merged into the
/// current config by the server.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct QueuePut {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<Retry>,
    /// `Some(None)` sends `"push": null`, which removes the push target;
    /// `None` leaves it as it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub push: Option<Option<PushSpec>>,
}

/// `push` as the server shows it: the secret is never returned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushView {
    pub url: String,
    pub timeout_ms: u64,
    pub concurrency: u32,
    #[serde(default)]
    pub secret_set: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueConfigView {
    pub lease_ms: u64,
    pub max_attempts: u32,
    pub retry: Retry,
    #[serde(default)]
    pub push: Option<PushView>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
    pub scheduled: u64,
    pub ready: u64,
    pub leased: u64,
    pub dead: u64,
}

/// The queue object: `{name, config, paused, stats}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Queue {
    pub name: String,
    pub config: QueueConfigView,
    pub paused: bool,
    pub stats: QueueStats,
    /// Not in api.md v1; read when a server sends it (timed pauses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_until: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueList {
    pub queues: Vec<Queue>,
}

// ----- messages -----

/// One message to enqueue (`POST .../messages`, or an item of a batch).
/// At most one of `delay_ms` and `deliver_at`; neither means "now".
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NewMessage {
    #[serde(flatten)]
    pub payload: Payload,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deliver_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
}

impl NewMessage {
    /// A message delivered now with default priority and no headers.
    pub fn new(payload: impl Into<Payload>) -> Self {
        Self {
            payload: payload.into(),
            id: None,
            delay_ms: None,
            deliver_at: None,
            priority: None,
            headers: BTreeMap::new(),
            max_attempts: None,
        }
    }

    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    pub fn delay_ms(mut self, delay_ms: u64) -> Self {
        self.delay_ms = Some(delay_ms);
        self
    }

    pub fn deliver_at(mut self, epoch_ms: u64) -> Self {
        self.deliver_at = Some(epoch_ms);
        self
    }

    pub fn priority(mut self, priority: u32) -> Self {
        self.priority = Some(priority);
        self
    }

    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }
}

/// Answer to an enqueue: 201 `created: true`, or 200 `created: false` when
/// a live message with that id already existed (nothing changed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enqueued {
    pub id: String,
    pub seq: u64,
    pub deliver_at: u64,
    pub created: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct BatchBody<'a> {
    pub messages: &'a [NewMessage],
}

/// One ack of `POST .../acks`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckItem {
    pub id: String,
    pub lease_id: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct AcksBody<'a> {
    pub acks: &'a [AckItem],
}

/// One result of a batch ack, in input order: `acked: true`, or the error
/// the single ack would have answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AckResult {
    pub id: String,
    #[serde(default)]
    pub acked: bool,
    #[serde(default)]
    pub error: Option<ErrorDetail>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AckResults {
    pub results: Vec<AckResult>,
}

/// One result of a batch enqueue, in input order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BatchItem {
    Ok(Enqueued),
    Err(ErrorBody),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BatchResults {
    pub results: Vec<BatchItem>,
}

/// A message as `GET .../messages/{id}` (and the dead list) shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageView {
    pub id: String,
    pub seq: u64,
    pub queue: String,
    /// `scheduled`, `ready`, `leased` or `dead`.
    pub state: String,
    pub deliver_at: u64,
    pub attempts: u32,
    pub priority: u32,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(flatten)]
    pub payload: Payload,
    pub enqueued_at: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MessageList {
    pub messages: Vec<MessageView>,
}

/// Body of `PATCH .../messages/{id}`: at most one of `delay_ms` and
/// `deliver_at`, optionally a new priority.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Reschedule {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deliver_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
}

// ----- consuming -----

/// Body of `POST .../leases`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LeaseOptions {
    /// 1..=1000.
    pub max: u32,
    /// 0..=60000: how long the server may hold the request for a message.
    pub wait_ms: u64,
    /// The queue's `lease_ms` when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
}

impl Default for LeaseOptions {
    fn default() -> Self {
        Self {
            max: 1,
            wait_ms: 0,
            lease_ms: None,
        }
    }
}

/// One leased message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leased {
    pub id: String,
    pub seq: u64,
    pub lease_id: String,
    pub lease_until: u64,
    pub attempt: u32,
    pub deliver_at: u64,
    pub priority: u32,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(flatten)]
    pub payload: Payload,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LeasedList {
    pub messages: Vec<Leased>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct LeaseRef<'a> {
    pub lease_id: &'a str,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct NackBody<'a> {
    pub lease_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct ExtendBody<'a> {
    pub lease_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extended {
    pub lease_until: u64,
}

// ----- dead letters -----

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct RedriveBody<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ids: Option<&'a [String]>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Redriven {
    pub redriven: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn new_message_serializes_only_given_fields() {
        let m = NewMessage::new("hi").delay_ms(5).header("k", "v");
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(
            v,
            json!({"payload": "hi", "delay_ms": 5, "headers": {"k": "v"}})
        );
        let bin = NewMessage::new(vec![0xff, 0x00]);
        let v = serde_json::to_value(&bin).unwrap();
        assert_eq!(v, json!({"payload_base64": "/wA="}));
    }

    #[test]
    fn payload_round_trips_text_and_base64() {
        let text: Leased = serde_json::from_value(json!({
            "id": "a", "seq": 1, "lease_id": "l", "lease_until": 9, "attempt": 1,
            "deliver_at": 2, "priority": 1024, "headers": {}, "payload": "hello"
        }))
        .unwrap();
        assert_eq!(text.payload.as_bytes(), b"hello");
        let bin: Leased = serde_json::from_value(json!({
            "id": "a", "seq": 1, "lease_id": "l", "lease_until": 9, "attempt": 1,
            "deliver_at": 2, "priority": 1024, "payload_base64": "/wA=", "extra": true
        }))
        .unwrap();
        assert_eq!(bin.payload, Payload::Binary(vec![0xff, 0]));
    }

    #[test]
    fn push_null_removes_and_absent_keeps() {
        let remove = QueuePut {
            push: Some(None),
            ..QueuePut::default()
        };
        assert_eq!(
            serde_json::to_value(&remove).unwrap(),
            json!({"push": null})
        );
        assert_eq!(
            serde_json::to_value(QueuePut::default()).unwrap(),
            json!({})
        );
    }

    #[test]
    fn batch_items_are_results_or_errors() {
        let results: BatchResults = serde_json::from_value(json!({"results": [
            {"id": "a", "seq": 1, "deliver_at": 3, "created": true},
            {"error": {"code": "invalid_argument", "message": "bad"}}
        ]}))
        .unwrap();
        assert!(matches!(results.results[0], BatchItem::Ok(_)));
        assert!(
            matches!(&results.results[1], BatchItem::Err(e) if e.error.code == "invalid_argument")
        );
    }
}
