//! The dashboard's read-only additions to v1 (docs/api.md, "Dashboard
//! endpoints"). Their message listing answers a
//! [`MessageList`](crate::MessageList), the same message objects as
//! `GET .../messages/{id}`.

use serde::{Deserialize, Serialize};

/// `GET /v1/queues/{queue}/histogram`: scheduled messages counted by due
/// time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Histogram {
    pub from: u64,
    pub to: u64,
    /// Width of each bucket; bucket `i` covers
    /// `[from + i * bucket_ms, from + (i + 1) * bucket_ms)`.
    pub bucket_ms: u64,
    pub counts: Vec<u64>,
    /// The broker stopped counting early: the counts are a lower bound.
    pub truncated: bool,
}
