//! Flow control: the `flow` object of a queue (as a `PUT` sets it and as
//! the queue object shows it) and the key view
//! (`GET /v1/queues/{queue}/keys/{key}`).
//!
//! The request side is strict and leaves every field optional; the answer
//! has api.md's defaults filled in (`burst` `max(2, ceil(limit /
//! period_ms) + 1)`, `ordered` false,
//! `max_deferrals` 100) and `null` for a limit that is not set, so a client
//! sees the whole config without knowing the defaults.

use serde::{Deserialize, Serialize};

/// Default `max_deferrals` (api.md).
pub const DEFAULT_MAX_DEFERRALS: u32 = 100;

/// `flow` as a `PUT` sets it: replaced as a whole, every field optional
/// (`null` counts as absent).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FlowBody {
    /// Deliveries of the whole queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateBody>,
    /// Deliveries of each key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_rate: Option<RateBody>,
    /// At most this many messages of the queue leased (or pushed) at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// At most this many messages of one key leased (or pushed) at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_concurrency: Option<u32>,
    /// One message of a key at a time, in order; a failed one holds its
    /// key. Default `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordered: Option<bool>,
    /// Deferrals in a row after which a message is dead (default 100, at
    /// most 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_deferrals: Option<u32>,
}

impl FlowBody {
    pub fn rate(mut self, limit: u64, period_ms: u64) -> Self {
        self.rate = Some(RateBody::new(limit, period_ms));
        self
    }

    pub fn key_rate(mut self, limit: u64, period_ms: u64) -> Self {
        self.key_rate = Some(RateBody::new(limit, period_ms));
        self
    }

    pub fn concurrency(mut self, concurrency: u32) -> Self {
        self.concurrency = Some(concurrency);
        self
    }

    pub fn key_concurrency(mut self, key_concurrency: u32) -> Self {
        self.key_concurrency = Some(key_concurrency);
        self
    }

    pub fn ordered(mut self, ordered: bool) -> Self {
        self.ordered = Some(ordered);
        self
    }

    pub fn max_deferrals(mut self, max_deferrals: u32) -> Self {
        self.max_deferrals = Some(max_deferrals);
        self
    }
}

/// A token bucket as a `PUT` sets it: `limit` deliveries per `period_ms`,
/// up to `burst` at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RateBody {
    /// 1..=1000000.
    // u64, not u32: a limit too large for u32 is still answered with the
    // range rule that names `limit`, not a bare type error.
    pub limit: u64,
    /// 1..=86400000.
    pub period_ms: u64,
    /// At least 1; default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

impl RateBody {
    pub fn new(limit: u64, period_ms: u64) -> Self {
        Self {
            limit,
            period_ms,
            burst: None,
        }
    }

    pub fn burst(mut self, burst: u32) -> Self {
        self.burst = Some(burst);
        self
    }
}

/// `flow` as the queue object shows it: defaults filled in, `null` for a
/// limit that is not set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = FlowDto))]
pub struct FlowView {
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub rate: Option<RateView>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub key_rate: Option<RateView>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub concurrency: Option<u32>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub key_concurrency: Option<u32>,
    pub ordered: bool,
    pub max_deferrals: u32,
}

/// A rate as the queue object shows it (`burst` filled in).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = RateDto))]
pub struct RateView {
    pub limit: u64,
    pub period_ms: u64,
    pub burst: u32,
}

/// `GET /v1/queues/{queue}/keys/{key}`: the key's live messages by state
/// and until when it cools down. A key with no live message answers zeros.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyInfo {
    pub key: String,
    pub scheduled: u64,
    pub ready: u64,
    pub leased: u64,
    pub dead: u64,
    /// Epoch ms until which no message of the key is delivered (after a
    /// deferral); `null` when it does not cool down.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub cooling_until: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn body_is_strict_and_sends_only_what_is_set() {
        let body = FlowBody::default().rate(50, 1000).key_concurrency(2);
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({"rate": {"limit": 50, "period_ms": 1000}, "key_concurrency": 2})
        );
        let typo = json!({"rate": {"limit": 5, "period_ms": 1000, "brust": 2}});
        assert!(serde_json::from_value::<FlowBody>(typo).is_err());
        let outer_typo = json!({"key_concurency": 2});
        assert!(serde_json::from_value::<FlowBody>(outer_typo).is_err());
        let without_period = json!({"rate": {"limit": 5}});
        assert!(serde_json::from_value::<FlowBody>(without_period).is_err());
    }

    #[test]
    fn null_reads_as_absent() {
        let body: FlowBody = serde_json::from_value(json!({
            "rate": null, "ordered": null, "max_deferrals": null,
            "key_rate": {"limit": 1, "period_ms": 10, "burst": null}
        }))
        .unwrap();
        assert_eq!(body, FlowBody::default().key_rate(1, 10));
    }

    #[test]
    fn view_shows_unset_limits_as_null() {
        let view = FlowView {
            rate: None,
            key_rate: None,
            concurrency: Some(4),
            key_concurrency: None,
            ordered: false,
            max_deferrals: DEFAULT_MAX_DEFERRALS,
        };
        assert_eq!(
            serde_json::to_value(&view).unwrap(),
            json!({"rate": null, "key_rate": null, "concurrency": 4,
                   "key_concurrency": null, "ordered": false, "max_deferrals": 100})
        );
    }
}
