//! Consuming: lease, ack (one or a batch), nack, extend.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::ErrorDetail;
use crate::nullable;
use crate::payload::Payload;

/// Default of the lease body's `max`.
pub const DEFAULT_LEASE_MAX: u32 = 1;
/// Default of the lease body's `wait_ms`.
pub const DEFAULT_LEASE_WAIT_MS: u64 = 0;

/// `POST .../leases`. An empty body (or `{}`) means the defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default, deny_unknown_fields)]
pub struct LeaseBody {
    /// 1..=1000, default 1.
    #[serde(deserialize_with = "nullable::u32_or::<_, DEFAULT_LEASE_MAX>")]
    pub max: u32,
    /// 0..=60000, default 0: how long the server may hold the request for
    /// a message.
    #[serde(deserialize_with = "nullable::u64_or::<_, DEFAULT_LEASE_WAIT_MS>")]
    pub wait_ms: u64,
    /// Default: the message's, else the queue's `lease_ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
}

impl Default for LeaseBody {
    fn default() -> Self {
        Self {
            max: DEFAULT_LEASE_MAX,
            wait_ms: DEFAULT_LEASE_WAIT_MS,
            lease_ms: None,
        }
    }
}

/// One leased message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = LeasedMessage))]
pub struct Leased {
    pub id: String,
    pub seq: u64,
    pub lease_id: String,
    pub lease_until: u64,
    /// 1 for the first delivery.
    pub attempt: u32,
    pub deliver_at: u64,
    pub priority: u32,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub headers: BTreeMap<String, String>,
    #[serde(flatten)]
    pub payload: Payload,
    /// Its flow key; `null` when it has none.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub key: Option<String>,
}

/// The lease answer: up to `max` messages, an empty list when none came.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = LeaseResponse))]
pub struct LeasedList {
    pub messages: Vec<Leased>,
}

/// `POST .../messages/{id}/ack`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AckBody {
    pub lease_id: String,
}

/// `POST /v1/queues/{queue}/acks`: up to 1000 acks, each as the single
/// ack would be.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AcksBody {
    pub acks: Vec<AckItem>,
}

/// One ack of a batch ack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AckItem {
    pub id: String,
    pub lease_id: String,
}

/// One ack's outcome: `acked: true`, or the error the single ack would
/// have answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AckResult {
    pub id: String,
    /// Present (`true`) only for a done ack.
    #[serde(default, skip_serializing_if = "is_false")]
    pub acked: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}

fn is_false(value: &bool) -> bool {
    !*value
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AckResults {
    pub results: Vec<AckResult>,
}

/// `POST .../messages/{id}/nack`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NackBody {
    pub lease_id: String,
    /// Retry after this long; default: the queue's backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// The delivery was not an attempt (the consumer was told to slow
    /// down): its attempt is given back and its key cools down until it is
    /// due again. Only on a queue with `flow`; default `false`.
    #[serde(
        default,
        deserialize_with = "nullable::or_default",
        skip_serializing_if = "is_false"
    )]
    pub defer: bool,
    /// Why the delivery failed: at most 1024 bytes of UTF-8, kept as the
    /// message's `last_error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `POST .../messages/{id}/extend`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ExtendBody {
    pub lease_id: String,
    /// Default: the message's, else the queue's `lease_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
}

/// The extend answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = ExtendResponse))]
pub struct Extended {
    pub lease_until: u64,
}
