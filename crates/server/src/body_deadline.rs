//! The request body's deadline: a body must arrive within `body_timeout`,
//! extended by one second for every `body_min_rate` bytes received (Apache's
//! `RequestReadTimeout body=20,MinRate=500` rule). A body sent slower than
//! that is cut: the handler's read fails, the answer is 408
//! `request_timeout` and the HTTP/1 connection closes, freeing its slot.
//!
//! Without it a request whose head arrived is busy for as long as its body
//! trickles, and busy connections are not evicted at the connection limit:
//! a few hundred clients sending one byte every few seconds would hold
//! every slot. The extension by bytes received keeps honest large uploads
//! on slow links alive (1 MiB at 500 B/s takes 35 minutes and passes).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode, Version};
use axum::response::{IntoResponse, Response};
use hyper::body::{Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::error::ApiError;
use crate::listener::ConnectionLimits;
use crate::metrics::HTTP_SLOW_BODIES_TOTAL;

/// Set when a request's body missed its deadline; a request extension, so
/// the answer can say so whatever the handler made of the failed read.
#[derive(Clone, Default)]
pub(crate) struct TooSlow(Arc<AtomicBool>);

#[derive(Debug, thiserror::Error)]
#[error("the request body arrived too slowly")]
struct BodyTooSlow;

/// `request` with its body under the deadline of `limits`. A request
/// without a body is left alone (no timer, no extension).
pub(crate) fn guard(request: hyper::Request<Incoming>, limits: &ConnectionLimits) -> Request {
    let (mut parts, body) = request.into_parts();
    if hyper::body::Body::is_end_stream(&body) {
        return Request::from_parts(parts, Body::new(body));
    }
    let flag = TooSlow::default();
    parts.extensions.insert(flag.clone());
    let body = DeadlineBody {
        inner: body,
        started: Instant::now(),
        timeout: limits.body_timeout,
        min_rate: limits.body_min_rate,
        received: 0,
        timer: None,
        flag,
    };
    Request::from_parts(parts, Body::new(body))
}

/// The deadline flag of `request`'s body, if it has one (see [`guard`]).
pub(crate) fn too_slow_flag(request: &Request) -> Option<TooSlow> {
    request.extensions().get::<TooSlow>().cloned()
}

/// A request whose body missed its deadline is answered 408 (and, on
/// HTTP/1, the connection closed), whatever the handler answered to its
/// failed read; otherwise `response` as it is.
pub(crate) fn answer_if_too_slow(
    flag: Option<TooSlow>,
    version: Version,
    response: Response,
) -> Response {
    if !flag.is_some_and(|flag| flag.0.load(Ordering::Relaxed)) {
        return response;
    }
    let mut answer = ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "request_timeout",
        "the request body arrived too slowly",
    )
    .into_response();
    // HTTP/2 has no such header (hyper would drop it): the stream ends
    // with the answer and the connection serves others.
    if version < Version::HTTP_2 {
        answer
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    answer
}

struct DeadlineBody {
    inner: Incoming,
    started: Instant,
    timeout: Duration,
    /// Bytes per second that each extend the deadline by a second; 0: the
    /// deadline is `timeout` from the end of the head, whatever arrives.
    min_rate: u64,
    received: u64,
    /// Armed on the first read that has to wait (most bodies arrive with
    /// their head and never need a timer).
    timer: Option<Pin<Box<Sleep>>>,
    flag: TooSlow,
}

impl DeadlineBody {
    fn deadline(&self) -> Instant {
        let earned = match self.min_rate {
            0 => Duration::ZERO,
            rate => Duration::from_millis(self.received.saturating_mul(1000) / rate),
        };
        self.started + self.timeout + earned
    }

    /// Pending until the deadline; re-armed when it moved since.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = self.deadline();
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.deadline() != deadline {
            timer.as_mut().reset(deadline);
        }
        timer.as_mut().poll(cx)
    }
}

impl hyper::body::Body for DeadlineBody {
    type Data = <Incoming as hyper::body::Body>::Data;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.received = this.received.saturating_add(data.len() as u64);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(error.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match this.poll_deadline(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(()) => {
                    if !this.flag.0.swap(true, Ordering::Relaxed) {
                        metrics::counter!(HTTP_SLOW_BODIES_TOTAL).increment(1);
                        tracing::debug!(
                            received = this.received,
                            "closing a request whose body arrives too slowly"
                        );
                    }
                    Poll::Ready(Some(Err(BodyTooSlow.into())))
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
