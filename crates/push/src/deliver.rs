//! One push request: building it (body, `delayd-*` headers, signature),
//! sending it, and classifying the answer into an [`Outcome`].

use std::error::Error as _;
use std::time::{Duration, UNIX_EPOCH};

use delayd_core::Delivery;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use reqwest::{Client, Url};

use crate::policy::PolicyError;
use crate::signature::sign;

/// Responses are read (and discarded) up to this size so that the
/// connection can go back to the pool; a larger body closes it instead.
const DRAIN_LIMIT: usize = 64 * 1024;
/// How much of a failed answer's body its error text keeps (api.md).
pub(crate) const BODY_IN_ERROR: usize = 256;

/// Headers a message may not forward: they describe the connection or the
/// body framing, which belong to the HTTP client, not to the message.
pub(crate) const HOP_BY_HOP: &[&str] = &[
    "connection",
    "content-length",
    "host",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Where and how one queue pushes; built once per worker from the queue's
/// push config.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub url: Url,
    pub timeout: Duration,
    pub secret: Option<Vec<u8>>,
    /// The queue's push credentials (`push.headers`), checked.
    pub headers: HeaderMap,
}

/// What became of one push request.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// A 2xx answer: ack.
    Delivered,
    /// Any other status (3xx is not followed). `retry_after_ms` from the
    /// `Retry-After` header, unbounded here.
    HttpError {
        status: u16,
        retry_after_ms: Option<u64>,
        /// The start of the answer's body (at most [`BODY_IN_ERROR`]
        /// bytes, invalid UTF-8 replaced).
        body: String,
    },
    /// No answer within `timeout_ms`.
    Timeout,
    /// The connection could not be made (refused, reset, TLS failure).
    Connect(String),
    /// The allowlist refused the target (at configuration or after DNS).
    Disallowed(PolicyError),
    /// Anything else the client reported.
    Error(String),
}

impl Outcome {
    /// The `outcome` label of [`crate::metric::PUSH_DELIVERIES_TOTAL`].
    pub fn label(&self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::HttpError { .. } => "http_error",
            Self::Timeout => "timeout",
            Self::Connect(_) => "connect_error",
            Self::Disallowed(_) => "disallowed",
            Self::Error(_) => "error",
        }
    }
}

impl Outcome {
    /// What the failure is recorded as (the message's `last_error`, api.md
    /// "Message history"): the status and the start of the body, or the
    /// transport error, within [`delayd_core::MAX_ERROR_BYTES`].
    pub fn error_text(&self) -> Option<String> {
        let text = match self {
            Self::Delivered => return None,
            Self::HttpError { status, body, .. } if body.is_empty() => format!("HTTP {status}"),
            Self::HttpError { status, body, .. } => format!("HTTP {status}: {body}"),
            other => other.to_string(),
        };
        Some(delayd_core::truncate_text(&text, delayd_core::MAX_ERROR_BYTES).to_owned())
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Delivered => f.write_str("delivered"),
            Self::HttpError {
                status,
                retry_after_ms: Some(ms),
                ..
            } => write!(f, "answered {status} (retry after {ms} ms)"),
            Self::HttpError { status, .. } => write!(f, "answered {status}"),
            Self::Timeout => f.write_str("no answer within timeout_ms"),
            Self::Connect(error) => write!(f, "connect failed: {error}"),
            Self::Disallowed(error) => write!(f, "refused by the allowlist: {error}"),
            Self::Error(error) => write!(f, "request failed: {error}"),
        }
    }
}

/// Sends `delivery` to `target` (recording its `answered` lateness: the
/// request is the push delivery's answer) and classifies the answer. The payload is
/// passed separately, by value, so that it becomes the body without a copy
/// (`delivery.payload` is ignored). `now_ms` is the wall clock (for
/// `delayd-timestamp` and HTTP-date `Retry-After`).
pub(crate) async fn post(
    client: &Client,
    target: &Target,
    delivery: &Delivery,
    payload: Vec<u8>,
    now_ms: u64,
) -> Outcome {
    let timestamp = now_ms / 1000;
    // The push counterpart of a pull's answer: the request goes out now.
    delayd_core::metric::record_lateness(
        delayd_core::metric::Stage::Answered,
        now_ms,
        delivery.deliver_at,
    );
    let headers = build_headers(target, delivery, &payload, timestamp);
    let request = client
        .post(target.url.clone())
        .timeout(target.timeout)
        .headers(headers)
        .body(payload);
    match request.send().await {
        Ok(response) => classify_response(response, now_ms).await,
        Err(error) => classify_error(&error),
    }
}

async fn classify_response(mut response: reqwest::Response, now_ms: u64) -> Outcome {
    let status = response.status();
    let retry_after_ms = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| parse_retry_after(v, now_ms));
    // Read a small body so the connection can be reused; the request's
    // timeout bounds this too, and a failure here does not change the
    // outcome (the status line was the answer).
    let mut drained = 0;
    let mut start = Vec::new();
    while drained <= DRAIN_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                drained += chunk.len();
                if !status.is_success() && start.len() < BODY_IN_ERROR {
                    let room = BODY_IN_ERROR - start.len();
                    start.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    if status.is_success() {
        Outcome::Delivered
    } else {
        Outcome::HttpError {
            status: status.as_u16(),
            retry_after_ms,
            body: String::from_utf8_lossy(&start).into_owned(),
        }
    }
}

fn classify_error(error: &reqwest::Error) -> Outcome {
    // The resolver's policy refusal arrives wrapped in the client's
    // connect error; find it in the source chain.
    let mut source = error.source();
    while let Some(inner) = source {
        if let Some(policy) = inner.downcast_ref::<PolicyError>() {
            return Outcome::Disallowed(policy.clone());
        }
        source = inner.source();
    }
    if error.is_timeout() {
        Outcome::Timeout
    } else if error.is_connect() {
        Outcome::Connect(error_chain(error))
    } else {
        Outcome::Error(error_chain(error))
    }
}

fn error_chain(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

/// The request headers: forwarded message headers first, then the
/// target's credentials, then the `delayd-*` headers, which therefore
/// always win.
fn build_headers(
    target: &Target,
    delivery: &Delivery,
    payload: &[u8],
    timestamp: u64,
) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in &delivery.headers {
        let lower = name.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&lower.as_str()) || lower.starts_with("delayd-") {
            continue;
        }
        // Headers that are not valid HTTP (the API accepts any string) are
        // dropped rather than failing every attempt of the message.
        match (
            HeaderName::from_bytes(lower.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            (Ok(name), Ok(value)) => {
                headers.append(name, value);
            }
            _ => {
                tracing::debug!(header = %name, id = %delivery.id, "push: header not valid in HTTP, not forwarded")
            }
        }
    }
    // The target's credentials win over message headers.
    for (name, value) in &target.headers {
        headers.insert(name.clone(), value.clone());
    }
    if !headers.contains_key(CONTENT_TYPE) {
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
    }
    let mut set = |name: &'static str, value: String| {
        // Ids, queue names and numbers are ASCII by construction.
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    };
    set("delayd-id", delivery.id.to_string());
    set("delayd-queue", delivery.queue.to_string());
    set("delayd-attempt", delivery.attempt.to_string());
    set("delayd-deliver-at", delivery.deliver_at.to_string());
    set("delayd-timestamp", timestamp.to_string());
    if let Some(secret) = &target.secret {
        set("delayd-signature", sign(secret, timestamp, payload));
    }
    if let Some(key) = &delivery.key {
        // A key is UTF-8 without control characters: visible ASCII, space
        // and bytes >= 0x80, all valid in a header value (as obs-text).
        match HeaderValue::from_bytes(key.as_str().as_bytes()) {
            Ok(value) => {
                headers.insert(HeaderName::from_static("delayd-key"), value);
            }
            Err(_) => {
                tracing::debug!(id = %delivery.id, "push: key not valid in HTTP, not sent")
            }
        }
    }
    headers
}

/// `Retry-After` as delay-seconds or an HTTP-date, in milliseconds from
/// `now_ms`; `None` when unparsable. A date in the past is 0.
pub(crate) fn parse_retry_after(value: &HeaderValue, now_ms: u64) -> Option<u64> {
    let text = value.to_str().ok()?.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(seconds.saturating_mul(1000));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    let now = UNIX_EPOCH + Duration::from_millis(now_ms);
    let wait = at.duration_since(now).unwrap_or(Duration::ZERO);
    Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX))
}

/// Wall-clock ms as `SystemTime` (for tests of HTTP dates).
#[cfg(test)]
fn system_time(ms: u64) -> std::time::SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use delayd_core::{LeaseId, MessageId, QueueName};

    use super::*;
    use crate::signature::verify_signature;

    fn delivery(headers: &[(&str, &str)]) -> Delivery {
        Delivery {
            key: None,
            queue: QueueName::new("q").unwrap(),
            id: MessageId::new("m1").unwrap(),
            seq: 7,
            lease_id: LeaseId("l".into()),
            lease_until: 0,
            attempt: 3,
            deliver_at: 1_700_000_000_123,
            priority: 1,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
            payload: b"hello".to_vec(),
        }
    }

    fn target(secret: Option<&str>) -> Target {
        Target {
            url: Url::parse("http://example.com/hook").unwrap(),
            timeout: Duration::from_secs(1),
            secret: secret.map(|s| s.as_bytes().to_vec()),
            headers: HeaderMap::new(),
        }
    }

    #[test]
    fn delayd_headers_and_signature() {
        let h = build_headers(&target(Some("s3")), &delivery(&[]), b"hello", 1_700_000_000);
        assert_eq!(h["delayd-id"], "m1");
        assert_eq!(h["delayd-queue"], "q");
        assert_eq!(h["delayd-attempt"], "3");
        assert_eq!(h["delayd-deliver-at"], "1700000000123");
        assert_eq!(h["delayd-timestamp"], "1700000000");
        assert_eq!(h["content-type"], "application/octet-stream");
        let sig = h["delayd-signature"].to_str().unwrap();
        assert!(verify_signature(b"s3", 1_700_000_000, b"hello", sig));
        let unsigned = build_headers(&target(None), &delivery(&[]), b"hello", 1);
        assert!(!unsigned.contains_key("delayd-signature"));
    }

    #[test]
    fn key_is_sent_as_delayd_key_and_never_forged() {
        let plain = build_headers(&target(None), &delivery(&[]), b"hello", 1);
        assert!(!plain.contains_key("delayd-key"));
        let mut keyed = delivery(&[("delayd-key", "forged")]);
        keyed.key = Some(delayd_core::FlowKey::new("tenant/ü 7").unwrap());
        let h = build_headers(&target(None), &keyed, b"hello", 1);
        assert_eq!(h.get_all("delayd-key").iter().count(), 1);
        assert_eq!(h["delayd-key"].as_bytes(), "tenant/ü 7".as_bytes());
    }

    #[test]
    fn target_credentials_sent_and_win_over_message_headers() {
        let mut target = target(Some("s3"));
        target.headers.insert(
            HeaderName::from_static("authorization"),
            HeaderValue::from_static("Bearer queue"),
        );
        let d = delivery(&[("Authorization", "Bearer message"), ("x-a", "1")]);
        let h = build_headers(&target, &d, b"hello", 1);
        assert_eq!(h.get_all("authorization").iter().count(), 1);
        assert_eq!(h["authorization"], "Bearer queue");
        assert_eq!(h["x-a"], "1");
        assert!(h.contains_key("delayd-signature"));
    }

    #[test]
    fn message_headers_forwarded_but_never_override() {
        let d = delivery(&[
            ("Content-Type", "application/json"),
            ("x-trace", "abc"),
            ("delayd-id", "forged"),
            ("Host", "evil"),
            ("transfer-encoding", "chunked"),
            ("bad header", "x"),
            ("x-newline", "a\nb"),
        ]);
        let h = build_headers(&target(None), &d, b"hello", 1);
        assert_eq!(h["content-type"], "application/json");
        assert_eq!(h["x-trace"], "abc");
        assert_eq!(h["delayd-id"], "m1");
        assert_eq!(h.get_all("delayd-id").iter().count(), 1);
        assert!(!h.contains_key("host"));
        assert!(!h.contains_key("transfer-encoding"));
        assert!(!h.contains_key("x-newline"));
    }

    #[test]
    fn retry_after_forms() {
        let now = 1_700_000_000_000;
        let v = |s: &str| HeaderValue::from_str(s).unwrap();
        assert_eq!(parse_retry_after(&v("120"), now), Some(120_000));
        assert_eq!(parse_retry_after(&v(" 0 "), now), Some(0));
        let date = httpdate::fmt_http_date(system_time(now + 30_000));
        assert_eq!(parse_retry_after(&v(&date), now), Some(30_000));
        let past = httpdate::fmt_http_date(system_time(now - 30_000));
        assert_eq!(parse_retry_after(&v(&past), now), Some(0));
        assert_eq!(parse_retry_after(&v("soon"), now), None);
        assert_eq!(parse_retry_after(&v("-5"), now), None);
    }
}
