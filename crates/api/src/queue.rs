//! Queues: the `PUT /v1/queues/{queue}` body and the queue object that
//! `PUT`, `GET`, pause and resume answer with.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::flow::{FlowBody, FlowView};
use crate::nullable;

/// Default of `retry.initial_ms` (api.md).
pub const DEFAULT_RETRY_INITIAL_MS: u64 = 1000;
/// Default of `retry.max_ms` (api.md).
pub const DEFAULT_RETRY_MAX_MS: u64 = 3_600_000;
/// Default of `retry.multiplier` (api.md).
pub const DEFAULT_RETRY_MULTIPLIER: f64 = 2.0;
/// The longest `retain_ms` (30 days; api.md, "Retention, replace and
/// debounce"). The rule itself is core's; this copy is for the schema.
pub const MAX_RETAIN_MS: u64 = 2_592_000_000;

/// `PUT /v1/queues/{queue}`: every field optional; absent fields keep their
/// value, `retry`, `push` and `flow` are replaced whole, `push: null`
/// removes push and `flow: null` flow control.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct QueuePutBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryBody>,
    // `Some(None)` is `"push": null` (remove the push target); `None`
    // leaves it as it is.
    #[serde(
        default,
        deserialize_with = "nullable::present_or_null",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<PushBody>))]
    pub push: Option<Option<PushBody>>,
    /// Flow control (rate, concurrency, order), replaced as a whole;
    /// `null` removes it. `Some(None)` is `"flow": null`.
    #[serde(
        default,
        deserialize_with = "nullable::present_or_null",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<FlowBody>))]
    pub flow: Option<Option<FlowBody>>,
    /// How long a message that ended (acked, a push answered 2xx, or
    /// cancelled) is kept without its payload: 0 (the default) to
    /// 2592000000 (30 days). Meanwhile `GET` shows it as `acked` or
    /// `cancelled` with its `ended_at`, and an enqueue of its id (with the
    /// default `on_conflict: keep`) is a duplicate; it is not counted,
    /// listed or delivered, and every other call sees it as absent (404).
    /// A change applies to messages that end after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 2592000000_u64))]
    pub retain_ms: Option<u64>,
}

/// Retry backoff as a `PUT` sets it. Fields left out (or `null`) take
/// their defaults (1000, 3600000, 2.0), so a `retry` given is always whole.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default, deny_unknown_fields)]
pub struct RetryBody {
    #[serde(deserialize_with = "nullable::u64_or::<_, DEFAULT_RETRY_INITIAL_MS>")]
    pub initial_ms: u64,
    #[serde(deserialize_with = "nullable::u64_or::<_, DEFAULT_RETRY_MAX_MS>")]
    pub max_ms: u64,
    /// A number >= 1.0 (the only non-integer number of the API).
    #[serde(deserialize_with = "multiplier_or_default")]
    pub multiplier: f64,
}

impl Default for RetryBody {
    fn default() -> Self {
        Self {
            initial_ms: DEFAULT_RETRY_INITIAL_MS,
            max_ms: DEFAULT_RETRY_MAX_MS,
            multiplier: DEFAULT_RETRY_MULTIPLIER,
        }
    }
}

/// `f64` cannot be a const generic, so `null` gets its own reader here. It
/// expects what api.md says the field is, so a value of another type is
/// refused in those words (serde's own would say `f64`); the range itself
/// is core's rule.
fn multiplier_or_default<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    struct Multiplier;

    impl<'de> Visitor<'de> for Multiplier {
        type Value = f64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a number >= 1.0")
        }

        fn visit_f64<E: de::Error>(self, value: f64) -> Result<f64, E> {
            Ok(value)
        }

        fn visit_u64<E: de::Error>(self, value: u64) -> Result<f64, E> {
            Ok(value as f64)
        }

        fn visit_i64<E: de::Error>(self, value: i64) -> Result<f64, E> {
            Ok(value as f64)
        }

        fn visit_none<E: de::Error>(self) -> Result<f64, E> {
            Ok(DEFAULT_RETRY_MULTIPLIER)
        }

        fn visit_unit<E: de::Error>(self) -> Result<f64, E> {
            Ok(DEFAULT_RETRY_MULTIPLIER)
        }

        fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<f64, D::Error> {
            deserializer.deserialize_f64(self)
        }
    }

    deserializer.deserialize_option(Multiplier)
}

/// `push` as a `PUT` sets it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PushBody {
    pub url: String,
    /// Default 10000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Maximum push requests in flight for the queue; default 16.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// HMAC-SHA256 key for `delayd-signature`; never returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Sent with every push request (credentials such as `Authorization`),
    /// up to 16; never returned (`headers_set` names them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
}

/// The queue object: `{name, config, paused, stats}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = QueueDto))]
pub struct Queue {
    pub name: String,
    pub config: QueueConfig,
    pub paused: bool,
    /// Set while a timed pause (beanstalkd `pause-tube`) lasts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_until: Option<u64>,
    pub stats: QueueStats,
}

/// A queue's config as the server shows it: the `PUT` body's fields, with
/// `push.secret` replaced by `push.secret_set`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = QueueConfigDto))]
pub struct QueueConfig {
    pub lease_ms: u64,
    pub max_attempts: u32,
    pub retry: RetryPolicy,
    /// `null` when the queue has no push target.
    #[serde(default)]
    pub push: Option<PushView>,
    /// `null` when the queue has no flow control.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub flow: Option<FlowView>,
    /// How long an ended message is kept without its payload (0: not
    /// kept; at most 2592000000, 30 days).
    // `default`: a server older than retention does not send it, and kept
    // nothing.
    #[serde(default)]
    #[cfg_attr(
        feature = "openapi",
        schema(required = true, minimum = 0, maximum = 2592000000_u64)
    )]
    pub retain_ms: u64,
}

/// The retry backoff in force.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = RetryDto))]
pub struct RetryPolicy {
    pub initial_ms: u64,
    pub max_ms: u64,
    pub multiplier: f64,
}

/// `push` as the server shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = PushDto))]
pub struct PushView {
    pub url: String,
    pub timeout_ms: u64,
    pub concurrency: u32,
    /// Whether a signing secret is configured (the secret itself is never
    /// returned).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub secret_set: bool,
    /// The names of the push headers configured (their values are never
    /// returned).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub headers_set: Vec<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = StatsDto))]
pub struct QueueStats {
    pub scheduled: u64,
    pub ready: u64,
    pub leased: u64,
    pub dead: u64,
    /// Flow keys whose state the server keeps (live messages, a cooldown
    /// or a bucket not yet full again).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub flow_keys: u64,
    /// Of those, the keys cooling down after a deferral.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub cooling_keys: u64,
}

/// `GET /v1/queues`: every queue, by name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueueList {
    pub queues: Vec<Queue>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `retain_ms` is an integer (fractions, negatives and strings are
    /// refused by serde); `null` is "absent", as for every optional field.
    /// Its range is core's rule, checked by the server.
    #[test]
    fn retain_ms_is_a_strict_integer() {
        for wrong in [json!(-1), json!(1.5), json!("1d"), json!(true)] {
            let body = json!({ "retain_ms": wrong });
            let err = serde_json::from_value::<QueuePutBody>(body).unwrap_err();
            assert!(err.to_string().contains("expected u64"), "{wrong}: {err}");
        }
        let put: QueuePutBody = serde_json::from_value(json!({"retain_ms": 60000})).unwrap();
        assert_eq!(put.retain_ms, Some(60_000));
        let null: QueuePutBody = serde_json::from_value(json!({"retain_ms": null})).unwrap();
        assert_eq!(null, QueuePutBody::default());
        assert_eq!(serde_json::to_value(&null).unwrap(), json!({}));
    }

    /// A server older than retention sends no `retain_ms`: it kept nothing.
    #[test]
    fn config_without_retain_ms_reads_as_zero() {
        let config: QueueConfig = serde_json::from_value(json!({
            "lease_ms": 1, "max_attempts": 1,
            "retry": {"initial_ms": 1, "max_ms": 1, "multiplier": 1.0}
        }))
        .unwrap();
        assert_eq!(config.retain_ms, 0);
    }
}
