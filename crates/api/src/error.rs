//! The error body every failed request answers with, and the operations
//! endpoints' status body.

use serde::{Deserialize, Serialize};

/// `{"error": {"code", "message"}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorDetail {
    /// Stable snake_case code: `invalid_json`, `invalid_argument`,
    /// `unauthorized`, `not_found`, `queue_not_found`, `message_not_found`,
    /// `method_not_allowed`, `lease_mismatch`, `invalid_state`,
    /// `payload_too_large`, `unavailable`; new codes may be added.
    pub code: String,
    pub message: String,
}

/// `GET /healthz` (`ok`) and `GET /readyz` (`ready`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = StatusBody))]
pub struct Status {
    pub status: String,
}
