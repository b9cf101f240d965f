//! [`ClientError`], split by how a caller reacts: the server said no
//! ([`Api`](ClientError::Api), with api.md's error code), the server could
//! not be reached ([`Unreachable`](ClientError::Unreachable): retry later or
//! tell the user to start it), or the answer made no sense
//! ([`Decode`](ClientError::Decode): a version mismatch or a proxy in the way).

use crate::wire::ErrorBody;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error status and (usually) api.md's JSON
    /// error body. `code` is api.md's snake_case code (`queue_not_found`,
    /// `lease_mismatch`, ...); when the body was not JSON it is `http_<status>`.
    #[error("{code} (HTTP {status}): {message}")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    /// No answer: connection refused, DNS failure, or the request timed out.
    /// For a timed-out write the server may still have applied it.
    #[error("server {url} unreachable: {source}")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The connection broke in some other way after it was made.
    #[error("HTTP transport error talking to {url}: {source}")]
    Transport {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The server answered success but the body was not what api.md says.
    #[error("cannot decode the answer of {url} (HTTP {status}): {reason}")]
    Decode {
        url: String,
        status: u16,
        reason: String,
    },
    /// The base URL (or a path built from a queue name or id) is not a URL.
    #[error("invalid URL: {0}")]
    InvalidUrl(String),
}

impl ClientError {
    /// api.md's error code when the server answered with an error.
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Whether the server refused the call for the token's scopes (403
    /// `forbidden`; the message names the verb and the queue).
    pub fn is_forbidden(&self) -> bool {
        self.code() == Some("forbidden")
    }

    /// HTTP status when the server answered with an error.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Unreachable { .. })
    }

    /// Builds [`ClientError::Api`] from an error answer's status and body.
    /// A body that is not api.md's error object (a proxy's HTML page, an
    /// empty 503) still gives a useful error: code `http_<status>` and the
    /// start of the body as the message.
    pub(crate) fn from_error_body(status: u16, body: &[u8]) -> Self {
        match serde_json::from_slice::<ErrorBody>(body) {
            Ok(parsed) => Self::Api {
                status,
                code: parsed.error.code,
                message: parsed.error.message,
            },
            Err(_) => {
                let text = String::from_utf8_lossy(body);
                let snippet: String = text.trim().chars().take(200).collect();
                Self::Api {
                    status,
                    code: format!("http_{status}"),
                    message: if snippet.is_empty() {
                        format!("HTTP status {status} without a body")
                    } else {
                        snippet
                    },
                }
            }
        }
    }

    pub(crate) fn from_reqwest(url: &str, source: reqwest::Error) -> Self {
        let url = url.to_owned();
        if source.is_connect() || source.is_timeout() {
            Self::Unreachable { url, source }
        } else if source.is_builder() {
            Self::InvalidUrl(format!("{url}: {source}"))
        } else {
            Self::Transport { url, source }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_api_error_body() {
        let body = br#"{"error":{"code":"queue_not_found","message":"queue q not found"}}"#;
        let err = ClientError::from_error_body(404, body);
        assert_eq!(err.code(), Some("queue_not_found"));
        assert_eq!(err.status(), Some(404));
        assert_eq!(
            err.to_string(),
            "queue_not_found (HTTP 404): queue q not found"
        );
    }

    #[test]
    fn non_json_error_body_keeps_status() {
        let err = ClientError::from_error_body(502, b"<html>Bad gateway</html>");
        assert_eq!(err.code(), Some("http_502"));
        assert!(err.to_string().contains("Bad gateway"));
        let empty = ClientError::from_error_body(503, b"");
        assert!(empty.to_string().contains("without a body"));
    }
}
