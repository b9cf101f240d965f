//! Message history: `GET /v1/queues/{queue}/messages/{id}/events` answers
//! a [`History`], the message's last events, oldest first.
//!
//! An event is one object: `at`, `type`, `attempt` and the fields of its
//! type (api.md, "Message history"). [`EventKind`] holds `type` and those
//! fields. A type this version does not know (a newer server's) reads as
//! [`EventKind::Other`] with its fields kept, and writes back unchanged, so
//! a client keeps reading the histories of a newer server. For the same
//! reason the small vocabularies inside events (`via`, `reason`) are
//! strings, as the message object's `state` is.

use std::collections::BTreeMap;

use serde::de::{self, DeserializeOwned};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// `{"events": [...], "dropped": n}`: the message's kept events, oldest
/// first, and how many older ones were dropped (a message keeps its last
/// 32).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct History {
    pub events: Vec<Event>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub dropped: u64,
}

/// One transition of a message.
// Read, written and described (`openapi`) by hand below, so that a type
// this version does not know is kept as `EventKind::Other`, and so that
// the document describes each type as one flat object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// When it happened (epoch ms).
    pub at: u64,
    /// The message's attempt number after the event.
    pub attempt: u32,
    /// `type` and the type's own fields.
    pub kind: EventKind,
}

/// What happened: `type` and its fields.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// Enqueued (also each item of a batch, and each fire of a schedule).
    Enqueued,
    /// Its content replaced by an enqueue of its id (`on_conflict`).
    Replaced {
        /// The enqueue became the successor of a leased message, applied
        /// when the lease ends.
        after_lease: bool,
    },
    /// Its due time or priority changed (`PATCH`).
    Rescheduled,
    /// Handed out to a consumer.
    Leased {
        lease_until: u64,
        /// The frontend: `http`, `beanstalk` or `push`.
        #[cfg_attr(feature = "openapi", schema(example = "http"))]
        via: String,
    },
    Acked,
    /// A failed delivery reported by a nack (or a beanstalkd `release`).
    Nacked {
        /// The nack's `delay_ms`; `null` when the backoff applied.
        #[serde(default)]
        #[cfg_attr(feature = "openapi", schema(required = true))]
        delay_ms: Option<u64>,
        /// The nack's `error`; `null` when it gave none.
        #[serde(default)]
        #[cfg_attr(feature = "openapi", schema(required = true))]
        error: Option<String>,
    },
    /// A delivery that was not an attempt: the attempt is given back.
    Deferred {
        /// When the message is due again.
        until: u64,
        /// `nack` (`defer: true`), `push_429` or `push_503`.
        #[cfg_attr(feature = "openapi", schema(example = "push_429"))]
        reason: String,
    },
    /// Its lease ran out (`at` is the lease's end).
    Expired,
    /// A push that failed.
    PushFailed {
        /// The answer's HTTP status; `null` for a transport error.
        #[serde(default)]
        #[cfg_attr(feature = "openapi", schema(required = true))]
        status: Option<u16>,
        /// `HTTP <status>: <first 256 bytes of the body>`, or the
        /// transport error (also the message's `last_error`).
        error: String,
        /// How long the request took.
        duration_ms: u64,
    },
    /// It died.
    Dead {
        /// `max_attempts`, `max_deferrals` or `buried`.
        #[cfg_attr(feature = "openapi", schema(example = "max_attempts"))]
        reason: String,
    },
    /// Back to `ready` from `dead` (redrive, beanstalkd `kick`).
    Redriven,
    Cancelled,
    /// A type this version does not know: its name and its other fields,
    /// as the server sent them.
    // Skipped by the derives (an `Event` reads and writes it, see there),
    // so a malformed event of a known type is an error naming its field,
    // never an `Other`.
    #[serde(skip)]
    Other {
        name: String,
        fields: BTreeMap<String, Value>,
    },
}

impl EventKind {
    /// The `type` of each variant but [`EventKind::Other`].
    pub const KNOWN: [&'static str; 12] = [
        "enqueued",
        "replaced",
        "rescheduled",
        "leased",
        "acked",
        "nacked",
        "deferred",
        "expired",
        "push_failed",
        "dead",
        "redriven",
        "cancelled",
    ];

    /// The event's `type`.
    pub fn name(&self) -> &str {
        match self {
            EventKind::Enqueued => "enqueued",
            EventKind::Replaced { .. } => "replaced",
            EventKind::Rescheduled => "rescheduled",
            EventKind::Leased { .. } => "leased",
            EventKind::Acked => "acked",
            EventKind::Nacked { .. } => "nacked",
            EventKind::Deferred { .. } => "deferred",
            EventKind::Expired => "expired",
            EventKind::PushFailed { .. } => "push_failed",
            EventKind::Dead { .. } => "dead",
            EventKind::Redriven => "redriven",
            EventKind::Cancelled => "cancelled",
            EventKind::Other { name, .. } => name,
        }
    }
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        /// A known event: the derived `EventKind` writes `type` and its
        /// fields.
        #[derive(Serialize)]
        struct Known<'a> {
            at: u64,
            #[serde(flatten)]
            kind: &'a EventKind,
            attempt: u32,
        }
        let EventKind::Other { name, fields } = &self.kind else {
            let known = Known {
                at: self.at,
                kind: &self.kind,
                attempt: self.attempt,
            };
            return known.serialize(serializer);
        };
        let own = ["at", "type", "attempt"];
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("at", &self.at)?;
        map.serialize_entry("type", name)?;
        map.serialize_entry("attempt", &self.attempt)?;
        for (field, value) in fields {
            if !own.contains(&field.as_str()) {
                map.serialize_entry(field, value)?;
            }
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut fields = Map::<String, Value>::deserialize(deserializer)?;
        let at = take(&mut fields, "at")?;
        let attempt = take(&mut fields, "attempt")?;
        let name = match fields.get("type") {
            Some(Value::String(name)) => name.clone(),
            Some(other) => {
                return Err(de::Error::custom(format_args!(
                    "field `type`: expected a string, got {other}"
                )))
            }
            None => return Err(de::Error::missing_field("type")),
        };
        let kind = if EventKind::KNOWN.contains(&name.as_str()) {
            EventKind::deserialize(Value::Object(fields))
                .map_err(|err| de::Error::custom(format_args!("a {name} event: {err}")))?
        } else {
            fields.remove("type");
            EventKind::Other {
                name,
                fields: fields.into_iter().collect(),
            }
        };
        Ok(Event { at, attempt, kind })
    }
}

/// Removes and reads the field `name` of an event.
fn take<T: DeserializeOwned, E: de::Error>(
    fields: &mut Map<String, Value>,
    name: &'static str,
) -> Result<T, E> {
    let value = fields.remove(name).ok_or_else(|| E::missing_field(name))?;
    serde_json::from_value(value).map_err(|err| E::custom(format_args!("field `{name}`: {err}")))
}

/// The schema of an [`Event`]: one object per type, each with `at`,
/// `type`, `attempt` and the type's fields (the derived [`EventKind`]
/// schema's variants, `at` and `attempt` added), so that generators that
/// cannot take `allOf` of a `oneOf` still make a model of each.
#[cfg(feature = "openapi")]
mod schema {
    use utoipa::openapi::schema::{KnownFormat, Schema, SchemaFormat, Type};
    use utoipa::openapi::{ObjectBuilder, OneOfBuilder, RefOr};
    use utoipa::PartialSchema;

    use super::{Event, EventKind};

    fn integer(format: KnownFormat, description: &str) -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(format)))
            .minimum(Some(0))
            .description(Some(description))
            .into()
    }

    /// `PushFailedEvent` for the variant whose `type` is `push_failed`: a
    /// name generators give the variant's model.
    fn title(type_schema: Option<&RefOr<Schema>>) -> Option<String> {
        let Some(RefOr::T(Schema::Object(type_schema))) = type_schema else {
            return None;
        };
        let name = type_schema.enum_values.as_ref()?.first()?.as_str()?;
        let words = name.split('_').map(|word| {
            let mut chars = word.chars();
            chars.next().map_or(String::new(), |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        });
        Some(words.collect::<String>() + "Event")
    }

    impl PartialSchema for Event {
        fn schema() -> RefOr<Schema> {
            let RefOr::T(Schema::OneOf(kinds)) = EventKind::schema() else {
                return EventKind::schema();
            };
            let mut types = OneOfBuilder::new().description(Some(
                "One transition of a message: `at`, `type`, `attempt` and the type's own \
                 fields. Newer servers may add types: a client should show one it does not \
                 know rather than fail.",
            ));
            for mut kind in kinds.items {
                if let RefOr::T(Schema::Object(object)) = &mut kind {
                    let at = integer(KnownFormat::Int64, "When it happened (epoch ms).");
                    let attempt = integer(
                        KnownFormat::Int32,
                        "The message's attempt number after the event.",
                    );
                    object.properties.insert("at".into(), at);
                    object.properties.insert("attempt".into(), attempt);
                    object.required.extend(["at".into(), "attempt".into()]);
                    object.title = title(object.properties.get("type"));
                }
                types = types.item(kind);
            }
            types.into()
        }
    }

    impl utoipa::ToSchema for Event {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(value: Value) -> Result<Event, String> {
        serde_json::from_value(value).map_err(|err| err.to_string())
    }

    #[test]
    fn every_known_type_round_trips_under_its_name() {
        let kinds = [
            EventKind::Enqueued,
            EventKind::Replaced { after_lease: true },
            EventKind::Rescheduled,
            EventKind::Leased {
                lease_until: 9,
                via: "push".into(),
            },
            EventKind::Acked,
            EventKind::Nacked {
                delay_ms: None,
                error: Some("boom".into()),
            },
            EventKind::Deferred {
                until: 5,
                reason: "nack".into(),
            },
            EventKind::Expired,
            EventKind::PushFailed {
                status: None,
                error: "connect failed".into(),
                duration_ms: 3,
            },
            EventKind::Dead {
                reason: "buried".into(),
            },
            EventKind::Redriven,
            EventKind::Cancelled,
        ];
        let names: Vec<&str> = kinds.iter().map(EventKind::name).collect();
        assert_eq!(names, EventKind::KNOWN);
        for kind in kinds {
            let event = Event {
                at: 1,
                attempt: 2,
                kind,
            };
            let json = serde_json::to_value(&event).unwrap();
            assert_eq!(json["type"], event.kind.name(), "{json}");
            assert_eq!(read(json).unwrap(), event);
        }
    }

    #[test]
    fn optional_fields_are_written_as_null() {
        let event = Event {
            at: 1,
            attempt: 1,
            kind: EventKind::PushFailed {
                status: None,
                error: "no answer within timeout_ms".into(),
                duration_ms: 10_000,
            },
        };
        assert_eq!(
            serde_json::to_value(&event).unwrap(),
            json!({"at": 1, "type": "push_failed", "attempt": 1, "status": null,
                   "error": "no answer within timeout_ms", "duration_ms": 10000})
        );
    }

    /// A newer server's event type reads, keeps its fields and writes back
    /// unchanged; a known type with a field missing is an error naming it.
    #[test]
    fn unknown_types_are_kept_and_malformed_known_ones_refused() {
        let newer = json!({"at": 5, "type": "teleported", "attempt": 0, "to": "mars"});
        let event = read(newer.clone()).unwrap();
        assert_eq!(event.kind.name(), "teleported");
        assert_eq!(serde_json::to_value(&event).unwrap(), newer);
        let broken = read(json!({"at": 5, "type": "leased", "attempt": 1, "via": "http"}));
        let broken = broken.unwrap_err();
        assert!(broken.contains("lease_until"), "{broken}");
        let untyped = read(json!({"at": 5, "attempt": 1})).unwrap_err();
        assert!(untyped.contains("`type`"), "{untyped}");
        let bad_at = read(json!({"at": -1, "type": "acked", "attempt": 1})).unwrap_err();
        assert!(bad_at.contains("`at`"), "{bad_at}");
        let newer_field = json!({"at": 5, "type": "acked", "attempt": 1, "by": "x"});
        assert_eq!(read(newer_field).unwrap().kind, EventKind::Acked);
    }
}
