//! [`ApiError`]: failures of the dashboard's endpoints, answered in api.md's
//! error shape with the status api.md assigns to each code.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use delayd_core::BrokerError;

use crate::wire::{ErrorBody, ErrorDetail};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            code: "invalid_argument",
            message: message.into(),
        }
    }
}

impl From<BrokerError> for ApiError {
    fn from(err: BrokerError) -> Self {
        let status = match &err {
            BrokerError::InvalidArgument(_) => StatusCode::BAD_REQUEST,
            BrokerError::QueueNotFound(_) | BrokerError::MessageNotFound { .. } => {
                StatusCode::NOT_FOUND
            }
            BrokerError::LeaseMismatch { .. } | BrokerError::InvalidState { .. } => {
                StatusCode::CONFLICT
            }
            BrokerError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
        };
        Self {
            status,
            code: err.code(),
            message: err.to_string(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
            },
        };
        (self.status, Json(body)).into_response()
    }
}
