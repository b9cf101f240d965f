//! The one place where failures become HTTP answers: every error is
//! `{"error": {"code": "<snake_case>", "message": "<human text>"}}` with the
//! status api.md assigns to its code.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use delayd_core::BrokerError;

/// An error as the API reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_argument", message)
    }

    pub fn invalid_json(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_json", message)
    }

    pub fn payload_too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message)
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid `Authorization: Bearer <token>` header is required",
        )
    }

    /// The error for a status that axum or tower produced on its own (no
    /// route, wrong method, body limit): same JSON shape as ours.
    pub fn from_status(status: StatusCode) -> Self {
        let (code, message) = match status {
            StatusCode::NOT_FOUND => ("not_found", "no such route"),
            StatusCode::METHOD_NOT_ALLOWED => {
                ("method_not_allowed", "method not allowed on this route")
            }
            StatusCode::PAYLOAD_TOO_LARGE => ("payload_too_large", "request body too large"),
            StatusCode::UNAUTHORIZED => ("unauthorized", "unauthorized"),
            s if s.is_server_error() => ("internal", "internal error"),
            _ => ("invalid_argument", "bad request"),
        };
        Self::new(status, code, message)
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message.clone(),
            },
        }
    }
}

impl From<BrokerError> for ApiError {
    fn from(err: BrokerError) -> Self {
        let status = match &err {
            BrokerError::InvalidArgument(_) => StatusCode::BAD_REQUEST,
            BrokerError::QueueNotFound(_)
            | BrokerError::MessageNotFound { .. }
            | BrokerError::ScheduleNotFound { .. } => StatusCode::NOT_FOUND,
            BrokerError::LeaseMismatch { .. } | BrokerError::InvalidState { .. } => {
                StatusCode::CONFLICT
            }
            BrokerError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            BrokerError::InsufficientStorage(_) => StatusCode::INSUFFICIENT_STORAGE,
        };
        Self::new(status, err.code(), err.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(code = self.code, message = %self.message, "request failed");
        }
        (self.status, Json(self.body())).into_response()
    }
}

/// The JSON body of every error answer: the wire crate's, which the client
/// parses.
pub use delayd_api::{ErrorBody, ErrorDetail};

pub type ApiResult<T> = Result<T, ApiError>;

/// Middleware: gives responses that axum or tower produced on their own
/// (unknown route, wrong method, body limits) the JSON error body. Headers
/// such as `Allow` on a 405 are kept.
pub async fn json_errors(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, _) = response.into_parts();
    let fresh = ApiError::from_status(status).into_response();
    let (fresh_parts, body) = fresh.into_parts();
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    parts.headers.extend(fresh_parts.headers);
    Response::from_parts(parts, body)
}
