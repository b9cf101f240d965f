//! Request extractors that answer in api.md's error shape instead of axum's
//! plain-text rejections.
//!
//! [`StrictJson`] reads the body whatever its content-type (api.md: "a body
//! is parsed as JSON whatever its content-type") and sorts serde_json's
//! errors by category: bad syntax is `invalid_json`, a well-formed body with
//! wrong fields or types is `invalid_argument`. An empty body reads as `{}`,
//! so bodies whose fields are all optional may be left out entirely.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use delayd_core::{FlowKey, MessageId, QueueName};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON body, parsed strictly (see the module docs).
pub struct StrictJson<T>(pub T);

impl<T, S> FromRequest<S> for StrictJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::payload_too_large("request body exceeds the server's max body size")
            } else {
                ApiError::invalid_argument(rejection.body_text())
            }
        })?;
        parse_json(&bytes).map(StrictJson)
    }
}

/// Parses a body; whitespace-only bodies count as `{}`.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    serde_json::from_slice(bytes).map_err(json_error)
}

/// Maps a serde_json error to `invalid_json` (syntax) or `invalid_argument`
/// (valid JSON of the wrong shape).
pub fn json_error(err: serde_json::Error) -> ApiError {
    use serde_json::error::Category;
    match err.classify() {
        Category::Data => ApiError::invalid_argument(err.to_string()),
        Category::Syntax | Category::Eof | Category::Io => ApiError::invalid_json(err.to_string()),
    }
}

/// Query parameters (dead-letter paging), strictly parsed.
pub struct StrictQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for StrictQuery<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| StrictQuery(q))
            .map_err(|rejection| ApiError::invalid_argument(rejection.body_text()))
    }
}

/// The `{queue}` path segment, validated.
pub struct QueuePath(pub QueueName);

/// The `{queue}` and `{id}` path segments, validated.
pub struct MessagePath(pub QueueName, pub MessageId);

/// The `{queue}` and `{key}` path segments, validated. The key arrives
/// percent-decoded (a `/` in a key is sent as `%2F`).
pub struct KeyPath(pub QueueName, pub FlowKey);

async fn path_params<S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
) -> Result<HashMap<String, String>, ApiError> {
    Path::<HashMap<String, String>>::from_request_parts(parts, state)
        .await
        .map(|Path(params)| params)
        .map_err(|rejection| ApiError::invalid_argument(rejection.body_text()))
}

fn queue_param(params: &HashMap<String, String>) -> Result<QueueName, ApiError> {
    let raw = params
        .get("queue")
        .ok_or_else(|| ApiError::invalid_argument("missing queue in path"))?;
    Ok(QueueName::new(raw.as_str())?)
}

impl<S: Send + Sync> FromRequestParts<S> for QueuePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let params = path_params(parts, state).await?;
        Ok(QueuePath(queue_param(&params)?))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for MessagePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let params = path_params(parts, state).await?;
        let queue = queue_param(&params)?;
        let raw = params
            .get("id")
            .ok_or_else(|| ApiError::invalid_argument("missing message id in path"))?;
        Ok(MessagePath(queue, MessageId::new(raw.as_str())?))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for KeyPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let params = path_params(parts, state).await?;
        let queue = queue_param(&params)?;
        let raw = params
            .get("key")
            .ok_or_else(|| ApiError::invalid_argument("missing key in path"))?;
        Ok(KeyPath(queue, crate::convert::flow_key(raw.clone())?))
    }
}

/// The answer for a request whose `Content-Length` exceeds the body cap:
/// 413 before a byte of its body is read, with the connection closed
/// after the answer (`Connection: close`), so a client cannot keep the
/// server busy by streaming the rest. Chunked bodies have no length up
/// front; the body limit refuses them while they are read.
pub(crate) fn oversized(
    headers: &axum::http::HeaderMap,
    max_body: usize,
) -> Option<axum::response::Response> {
    use axum::http::header::{CONNECTION, CONTENT_LENGTH};
    use axum::response::IntoResponse;
    let length = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&length| length > max_body as u64)?;
    let message = format!(
        "request body of {length} bytes exceeds the server's max body size ({max_body} bytes)"
    );
    let mut response = ApiError::payload_too_large(message).into_response();
    response
        .headers_mut()
        .insert(CONNECTION, axum::http::HeaderValue::from_static("close"));
    Some(response)
}
