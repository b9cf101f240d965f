//! Request extractors that answer in api.md's error shape instead of axum's
//! plain-text rejections.
//!
//! [`StrictJson`] reads the body whatever its content-type (api.md: "a body
//! is parsed as JSON whatever its content-type") and sorts serde_json's
//! errors by category: bad syntax is `invalid_json`, a well-formed body with
//! wrong fields or types is `invalid_argument`, whose message names the
//! field's path and what it must be (`body_error`). Every JSON body is read
//! here, so every route answers a wrong shape in the same words. An empty
//! body reads as `{}`, so bodies whose fields are all optional may be left
//! out entirely.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use delayd_core::{FlowKey, MessageId, QueueName};
use serde::de::DeserializeOwned;

use crate::body_error;
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
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let body =
        serde_path_to_error::deserialize(&mut deserializer).map_err(|err| json_error("", err))?;
    // As `serde_json::from_slice`: nothing but whitespace after the value.
    deserializer
        .end()
        .map_err(|err| ApiError::invalid_json(err.to_string()))?;
    Ok(body)
}

/// Reads a value already taken out of a body (a batch item) as `T`; the
/// message of a wrong shape names its fields from `place` down
/// (`messages[3].delay_ms`).
pub fn parse_value<T: DeserializeOwned>(
    value: serde_json::Value,
    place: &str,
) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|err| json_error(place, err))
}

/// Maps a serde_json error to `invalid_json` (syntax, with its position) or
/// `invalid_argument` (valid JSON of the wrong shape, with the field's path
/// and what it must be: `body_error`).
fn json_error(place: &str, err: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    use serde_json::error::Category;
    let inner = err.inner();
    match inner.classify() {
        Category::Data => {
            let message = body_error::describe(place, err.path(), &without_position(inner));
            ApiError::invalid_argument(message)
        }
        Category::Syntax | Category::Eof | Category::Io => {
            ApiError::invalid_json(inner.to_string())
        }
    }
}

/// serde_json's message without the ` at line L column C` it appends: the
/// path says where a wrong shape is.
fn without_position(err: &serde_json::Error) -> String {
    let text = err.to_string();
    if err.line() == 0 {
        return text;
    }
    let position = format!(" at line {} column {}", err.line(), err.column());
    match text.strip_suffix(&position) {
        Some(message) => message.to_owned(),
        None => text,
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
