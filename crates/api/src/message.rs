//! Messages: enqueue (one or a batch), the message object, reschedule.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::ErrorBody;
use crate::payload::Payload;

/// One message to enqueue (`POST .../messages`, or an item of a batch).
/// At most one of `delay_ms` and `deliver_at`; neither means "now".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, try_from = "EnqueueWire")]
pub struct EnqueueBody {
    /// Idempotency key `[A-Za-z0-9._:-]{1,256}`; generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Exactly one of `payload` (UTF-8, may be empty) and `payload_base64`.
    #[serde(flatten)]
    pub payload: Payload,
    /// Deliver this many ms from now. Not together with `deliver_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Deliver at this epoch ms; in the past means now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_at: Option<u64>,
    /// Lower is delivered first; default 1024.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    /// Forwarded to push targets; names starting with `delayd-` are refused.
    #[serde(
        default,
        deserialize_with = "nullable::or_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub headers: BTreeMap<String, String>,
    /// Overrides the queue's `max_attempts` for this message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// The message's flow key: UTF-8, 1 to 256 bytes, no control
    /// characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// Declares a request body's wire struct (see `EnqueueWire`) with the
/// fields of a message's content that an enqueue and a schedule's template
/// share: its own fields (each optional) with the payload's two keys at
/// `@payload;`, then `priority`, `headers`, `max_attempts` and `key` (the
/// order an unknown field's error lists them in).
macro_rules! message_wire {
    (
        $(#[$meta:meta])*
        struct $name:ident {
            $($before:ident: $before_ty:ty,)*
            @payload;
            $($after:ident: $after_ty:ty,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct $name {
            $(
                #[serde(default)]
                $before: $before_ty,
            )*
            #[serde(default)]
            payload: Option<String>,
            #[serde(default, deserialize_with = "crate::payload::read_base64")]
            payload_base64: Option<Vec<u8>>,
            $(
                #[serde(default)]
                $after: $after_ty,
            )*
            #[serde(default)]
            priority: Option<u32>,
            #[serde(default, deserialize_with = "crate::nullable::or_default")]
            headers: std::collections::BTreeMap<String, String>,
            #[serde(default)]
            max_attempts: Option<u32>,
            #[serde(default)]
            key: Option<String>,
        }
    };
}
pub(crate) use message_wire;

message_wire! {
    /// How a request carries an [`EnqueueBody`]: the payload's two keys are
    /// fields of their own here, not a flattened [`Payload`]. serde reads a
    /// flattened field from a buffer after the object, where it knows neither
    /// the object's fields (an unknown field's error could not list them) nor
    /// the key being read (a payload of the wrong type would not be named).
    struct EnqueueWire {
        id: Option<String>,
        @payload;
        delay_ms: Option<u64>,
        deliver_at: Option<u64>,
    }
}

impl TryFrom<EnqueueWire> for EnqueueBody {
    type Error = String;

    fn try_from(wire: EnqueueWire) -> Result<Self, String> {
        Ok(Self {
            id: wire.id,
            payload: Payload::from_keys(wire.payload, wire.payload_base64)?,
            delay_ms: wire.delay_ms,
            deliver_at: wire.deliver_at,
            priority: wire.priority,
            headers: wire.headers,
            max_attempts: wire.max_attempts,
            key: wire.key,
        })
    }
}

impl EnqueueBody {
    /// A message delivered now with default priority and no headers.
    pub fn new(payload: impl Into<Payload>) -> Self {
        Self {
            id: None,
            payload: payload.into(),
            delay_ms: None,
            deliver_at: None,
            priority: None,
            headers: BTreeMap::new(),
            max_attempts: None,
            key: None,
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

    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// The message's flow key (api.md, "Flow control").
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
}

/// `POST .../batch`: up to 1000 messages, each enqueued or refused on its
/// own.
// Generic over the item so that the server can read each item as raw JSON
// and answer an invalid one in its own result slot, while clients send
// `EnqueueBody`s (or references to them, to send a batch without copying).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BatchBody<T = EnqueueBody> {
    /// Up to 1000 items; each is validated on its own.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<EnqueueBody>))]
    pub messages: Vec<T>,
}

/// Answer to an enqueue: 201 `created: true`, or 200 `created: false` when
/// a live message with that id already existed (nothing changed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = EnqueueResult))]
pub struct Enqueued {
    pub id: String,
    pub seq: u64,
    pub deliver_at: u64,
    /// False when a live message with this id already existed (nothing
    /// changed).
    pub created: bool,
}

/// One batch result, in input order: the outcome or the item's own error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum BatchItemResult {
    Enqueued(Enqueued),
    Failed(ErrorBody),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BatchResults {
    pub results: Vec<BatchItemResult>,
}

/// `PATCH .../messages/{id}` of a scheduled or ready message: at most one
/// of `delay_ms` and `deliver_at`, optionally a new priority.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PatchBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
}

/// The message object (`GET .../messages/{id}`, `PATCH`, the dead list,
/// the dashboard's listing).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = MessageDto))]
pub struct Message {
    pub id: String,
    pub seq: u64,
    pub queue: String,
    /// `scheduled`, `ready`, `leased` or `dead`; for a retained message
    /// only (its queue's `retain_ms`), `acked` or `cancelled`.
    // A string, not an enum: a client keeps reading messages in a state a
    // newer server adds.
    #[cfg_attr(feature = "openapi", schema(example = "scheduled"))]
    pub state: String,
    pub deliver_at: u64,
    pub attempts: u32,
    pub priority: u32,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub headers: BTreeMap<String, String>,
    /// A retained (`acked` or `cancelled`) message's payload is not kept:
    /// it reads `"payload": ""`.
    #[serde(flatten)]
    pub payload: Payload,
    pub enqueued_at: u64,
    /// Its flow key; `null` when it has none.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub key: Option<String>,
    /// Deferrals in a row so far (a failed attempt and a redrive reset
    /// it); past the queue's `flow.max_deferrals` the message dies.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub deferrals: u32,
    /// The message's own `max_attempts`, when it overrides the queue's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// While leased.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_until: Option<u64>,
    /// While dead: when it died.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub died_at: Option<u64>,
    /// The last failure recorded (a nack's `error`, what a failed push
    /// answered), or `null`.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub last_error: Option<String>,
    /// When the message ended (acked, a push answered 2xx, or cancelled;
    /// only a retained message has ended); `null` while it lives.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub ended_at: Option<u64>,
}

/// `{"messages": [...]}` of message objects (dead list, dashboard listing).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MessageList {
    pub messages: Vec<Message>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(value: serde_json::Value) -> Result<EnqueueBody, String> {
        serde_json::from_value(value).map_err(|err| err.to_string())
    }

    /// Read through `EnqueueWire`, serde sees every field of the object:
    /// an unknown one's error lists the known ones, and the payload's keys
    /// are fields like any other.
    #[test]
    fn enqueue_body_reads_its_payload_keys_as_fields() {
        let typo = read(json!({"payload": "p", "dealy_ms": 1})).unwrap_err();
        assert!(
            typo.contains("unknown field `dealy_ms`, expected one of `id`, `payload`"),
            "{typo}"
        );
        let binary = read(json!({"payload_base64": "/wD+", "payload": null})).unwrap();
        assert_eq!(binary.payload, Payload::Binary(vec![0xff, 0, 0xfe]));
        let both = read(json!({"payload": "p", "payload_base64": "cA=="})).unwrap_err();
        assert!(both.contains("not both"), "{both}");
        let neither = read(json!({"id": "a"})).unwrap_err();
        assert!(neither.contains("is required"), "{neither}");
        let wrong = read(json!({"payload": 5})).unwrap_err();
        assert!(wrong.starts_with("invalid type: integer `5`"), "{wrong}");
        let body = EnqueueBody::new("p").id("a").priority(3).header("k", "v");
        assert_eq!(read(serde_json::to_value(&body).unwrap()).unwrap(), body);
    }
}
