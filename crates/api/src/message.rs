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
    /// What happens when `id` names a message that lives in the queue:
    /// `keep` (the default), `replace` or `debounce`. `replace` and
    /// `debounce` need an `id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_conflict: Option<OnConflict>,
    /// With `on_conflict: debounce` only: the due time is capped at the
    /// message's `enqueued_at` plus this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce_max_ms: Option<u64>,
}

/// `on_conflict` of an enqueue (api.md, "Retention, replace and
/// debounce"): what happens when its `id` names a live message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum OnConflict {
    /// Nothing changes: 200 `created: false` (idempotent enqueue).
    #[default]
    Keep,
    /// A `scheduled` or `ready` message takes the request's content and due
    /// time (a `leased` one keeps the request as its successor).
    Replace,
    /// As `replace`, with the due time capped at the message's
    /// `enqueued_at + debounce_max_ms`.
    Debounce,
}

impl OnConflict {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Keep => "keep",
            Self::Replace => "replace",
            Self::Debounce => "debounce",
        }
    }
}

// Read through `String` so that a wrong value's error names the field
// (serde's own says only "unknown variant").
impl TryFrom<String> for OnConflict {
    type Error = String;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        match value.as_str() {
            "keep" => Ok(Self::Keep),
            "replace" => Ok(Self::Replace),
            "debounce" => Ok(Self::Debounce),
            _ => Err(format!(
                "on_conflict must be `keep`, `replace` or `debounce`, got {value:?}"
            )),
        }
    }
}

/// Declares a request body's wire struct (see `EnqueueWire`) with the
/// fields of a message's content that an enqueue and a schedule's template
/// share: its own fields (each optional) with the payload's two keys at
/// `@payload;`, then `priority`, `headers`, `max_attempts` and `key`, then
/// the fields after an optional `@content;` (the order an unknown field's
/// error lists them in).
macro_rules! message_wire {
    (
        $(#[$meta:meta])*
        struct $name:ident {
            $($before:ident: $before_ty:ty,)*
            @payload;
            $($after:ident: $after_ty:ty,)*
            $(@content; $($last:ident: $last_ty:ty,)*)?
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
            $($(
                #[serde(default)]
                $last: $last_ty,
            )*)?
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
        @content;
        on_conflict: Option<OnConflict>,
        debounce_max_ms: Option<u64>,
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
            on_conflict: wire.on_conflict,
            debounce_max_ms: wire.debounce_max_ms,
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
            on_conflict: None,
            debounce_max_ms: None,
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

    /// What happens when the id names a live message (api.md, "Retention,
    /// replace and debounce"); `replace` and `debounce` need an id.
    pub fn on_conflict(mut self, on_conflict: OnConflict) -> Self {
        self.on_conflict = Some(on_conflict);
        self
    }

    /// Debounce's cap: the due time is at most the message's `enqueued_at`
    /// plus this. Only with `on_conflict(OnConflict::Debounce)`.
    pub fn debounce_max_ms(mut self, debounce_max_ms: u64) -> Self {
        self.debounce_max_ms = Some(debounce_max_ms);
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
/// a live message with that id already existed (nothing changed, unless
/// `replaced`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = EnqueueResult))]
pub struct Enqueued {
    pub id: String,
    pub seq: u64,
    /// The message's due time; with `after_lease`, its successor's.
    pub deliver_at: u64,
    /// False when a live message with this id already existed (nothing
    /// changed, unless `replaced`).
    pub created: bool,
    /// Present (`true`) only when `on_conflict` `replace` or `debounce`
    /// changed the live message, or (`after_lease`) gave it a successor.
    #[serde(default, skip_serializing_if = "is_false")]
    pub replaced: bool,
    /// Present (`true`) only when the live message is leased: the request
    /// is its successor, applied when the lease ends.
    #[serde(default, skip_serializing_if = "is_false")]
    pub after_lease: bool,
}

fn is_false(value: &bool) -> bool {
    !*value
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

    /// `on_conflict` and `debounce_max_ms` are sent only when set, read
    /// back, and an unknown `on_conflict` is refused naming the field.
    #[test]
    fn on_conflict_round_trips_and_names_a_wrong_value() {
        let body = EnqueueBody::new("p")
            .id("a")
            .on_conflict(OnConflict::Debounce)
            .debounce_max_ms(5_000);
        let json = serde_json::to_value(&body).unwrap();
        assert_eq!(
            json,
            json!({"id": "a", "payload": "p", "on_conflict": "debounce", "debounce_max_ms": 5000})
        );
        assert_eq!(read(json).unwrap(), body);
        let keep = read(json!({"payload": "p", "on_conflict": "keep"})).unwrap();
        assert_eq!(keep.on_conflict, Some(OnConflict::Keep));
        let wrong = read(json!({"payload": "p", "on_conflict": "overwrite"})).unwrap_err();
        assert!(
            wrong.starts_with("on_conflict must be `keep`, `replace` or `debounce`"),
            "{wrong}"
        );
        let typo = read(json!({"payload": "p", "on_confict": "replace"})).unwrap_err();
        assert!(
            typo.contains("`key`, `on_conflict`, `debounce_max_ms`"),
            "{typo}"
        );
    }

    /// `replaced` and `after_lease` are written only when true and read as
    /// false when absent (an older server's answer).
    #[test]
    fn enqueued_writes_replaced_and_after_lease_only_when_true() {
        let plain: Enqueued =
            serde_json::from_value(json!({"id": "a", "seq": 1, "deliver_at": 2, "created": false}))
                .unwrap();
        assert!(!plain.replaced && !plain.after_lease);
        assert_eq!(
            serde_json::to_value(&plain).unwrap(),
            json!({"id": "a", "seq": 1, "deliver_at": 2, "created": false})
        );
        let successor = Enqueued {
            replaced: true,
            after_lease: true,
            ..plain
        };
        assert_eq!(
            serde_json::to_value(&successor).unwrap(),
            json!({"id": "a", "seq": 1, "deliver_at": 2, "created": false,
                   "replaced": true, "after_lease": true})
        );
    }
}
