//! One HTTP connection: its phase (idle, reading a request head, busy with
//! requests), the timeouts that follow from it, and the registry of idle
//! connections the listener closes, oldest first, to make room at its limit.
//!
//! hyper's own `header_read_timeout` also runs while a keep-alive connection
//! waits for its next request, so it cannot give a short header timeout and
//! a long idle timeout at once. The phase is tracked here instead: bytes
//! arriving on an idle connection start the header clock (`Tracked`), a
//! request reaching the router makes it busy (`RequestGuard`), and the end
//! of the last response body makes it idle again (`GuardedBody`).
//!
//! HTTP/2 (known from its connection preface) has no request head in
//! progress to time: its bytes between requests are pings, settings and
//! window updates, so they do not start the header clock, and an HTTP/2
//! connection with no stream open is closed after the idle timeout. Its
//! streams are limited (`http2_max_streams`), and a client that cancels
//! requests faster than `max_cancelled_requests` per `CANCEL_WINDOW` (the
//! 2023 "rapid reset" flood, which the stream limit does not bound) has its
//! connection cut.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tower::ServiceExt;

use crate::body_deadline;
use crate::listener::ConnectionLimits;
use crate::metrics::HTTP_RESET_FLOODS_TOTAL;

/// What a client sends first on an HTTP/2 connection (RFC 9113, 3.4).
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The window over which cancelled requests are counted.
const CANCEL_WINDOW: std::time::Duration = std::time::Duration::from_secs(10);

/// Where a connection is between requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No request in progress and no byte of the next one yet; `ticket` is
    /// its place in the registry's idle order.
    Idle { since: Instant, ticket: u64 },
    /// Bytes of a request head arrived since `since`; still evictable.
    Head { since: Instant, ticket: u64 },
    /// `requests` are in the router or still sending their response body.
    Busy { requests: usize },
}

/// The idle (evictable) connections of one listener, by the order in which
/// they became idle.
#[derive(Default)]
pub(crate) struct Registry {
    idle: Mutex<BTreeMap<u64, Arc<ConnState>>>,
    next_ticket: AtomicU64,
}

impl Registry {
    fn idle(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<ConnState>>> {
        // The map stays consistent under a panic (single inserts/removes).
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn enter(&self, conn: &Arc<ConnState>) -> u64 {
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        self.idle().insert(ticket, Arc::clone(conn));
        ticket
    }

    fn leave(&self, ticket: u64) {
        self.idle().remove(&ticket);
    }

    /// Asks the connection idle longest to close; false when none is idle.
    pub(crate) fn evict_oldest(&self) -> bool {
        let oldest = self.idle().pop_first();
        match oldest {
            Some((_, conn)) => {
                conn.close.notify_one();
                true
            }
            None => false,
        }
    }
}

/// What a connection's watchdog and its requests share.
pub(crate) struct ConnState {
    phase: Mutex<Phase>,
    /// Wakes the watchdog when the phase changed (its deadline moved).
    changed: Notify,
    /// Eviction: close when idle, or after the request in progress.
    close: Notify,
    /// Cut at once (a reset flood), whatever is in progress.
    abort: Notify,
    /// The client spoke HTTP/2 (its preface arrived).
    http2: AtomicBool,
    /// Requests cancelled before their answer: (window start, count).
    cancelled: Mutex<(Instant, u32)>,
    registry: Arc<Registry>,
}

impl ConnState {
    /// A new connection counts as idle (evictable) until its first request.
    pub(crate) fn open(registry: &Arc<Registry>) -> Arc<Self> {
        let state = Arc::new(Self {
            phase: Mutex::new(Phase::Busy { requests: 0 }),
            changed: Notify::new(),
            close: Notify::new(),
            abort: Notify::new(),
            http2: AtomicBool::new(false),
            cancelled: Mutex::new((Instant::now(), 0)),
            registry: Arc::clone(registry),
        });
        let ticket = registry.enter(&state);
        *state.phase() = Phase::Idle {
            since: Instant::now(),
            ticket,
        };
        state
    }

    fn phase(&self) -> MutexGuard<'_, Phase> {
        self.phase
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn is_busy(&self) -> bool {
        matches!(*self.phase(), Phase::Busy { .. })
    }

    /// When the connection times out in its current phase; `None` while busy.
    /// A busy connection has no time limit here: a lease call ends with its
    /// `wait_ms`, a body sent too slowly is cut by `body_deadline`, but a
    /// client that never reads a large answer holds the connection, and
    /// cannot be evicted, until it goes away.
    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        match *self.phase() {
            Phase::Idle { since, .. } => Some(since + limits.idle_timeout),
            Phase::Head { since, .. } => Some(since + limits.header_timeout),
            Phase::Busy { .. } => None,
        }
    }

    fn on_bytes_read(&self) {
        if self.http2.load(Ordering::Relaxed) {
            return;
        }
        let mut phase = self.phase();
        if let Phase::Idle { ticket, .. } = *phase {
            *phase = Phase::Head {
                since: Instant::now(),
                ticket,
            };
            drop(phase);
            self.changed.notify_one();
        }
    }

    fn on_request(&self) {
        let mut phase = self.phase();
        *phase = match *phase {
            Phase::Idle { ticket, .. } | Phase::Head { ticket, .. } => {
                self.registry.leave(ticket);
                Phase::Busy { requests: 1 }
            }
            Phase::Busy { requests } => Phase::Busy {
                requests: requests + 1,
            },
        };
        // No wake-up: a busy connection has no deadline, and the watcher's
        // timer for the old one finds none when it fires. Only a deadline
        // that appears or moves earlier needs the watcher (per request,
        // this saves one task wake-up).
    }

    fn on_response_done(self: &Arc<Self>) {
        let mut phase = self.phase();
        let Phase::Busy { requests } = *phase else {
            debug_assert!(
                false,
                "a response ended on a connection not busy: {phase:?}"
            );
            return;
        };
        *phase = if requests > 1 {
            Phase::Busy {
                requests: requests - 1,
            }
        } else {
            Phase::Idle {
                since: Instant::now(),
                ticket: self.registry.enter(self),
            }
        };
        drop(phase);
        self.changed.notify_one();
    }

    /// The HTTP/2 preface arrived: the bytes that started the header clock
    /// were no request head, and none will be.
    fn on_http2(&self) {
        self.http2.store(true, Ordering::Relaxed);
        let mut phase = self.phase();
        if let Phase::Head { ticket, .. } = *phase {
            *phase = Phase::Idle {
                since: Instant::now(),
                ticket,
            };
            drop(phase);
            self.changed.notify_one();
        }
    }

    /// A request was abandoned (the client reset its stream or went away);
    /// more than `max` in a window cut the connection.
    fn on_cancelled(&self, max: u32) {
        let mut cancelled = self
            .cancelled
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (since, count) = &mut *cancelled;
        if since.elapsed() > CANCEL_WINDOW {
            (*since, *count) = (Instant::now(), 0);
        }
        *count += 1;
        if *count == max.saturating_add(1) {
            metrics::counter!(HTTP_RESET_FLOODS_TOTAL).increment(1);
            tracing::debug!(
                cancelled = *count,
                "closing a connection that cancels too many requests"
            );
            self.abort.notify_one();
        }
    }

    fn on_closed(&self) {
        if let Phase::Idle { ticket, .. } | Phase::Head { ticket, .. } = *self.phase() {
            self.registry.leave(ticket);
        }
    }
}

/// Marks one request busy from the router's call to the end of its response
/// body (dropped by hyper once written, or with the connection).
struct RequestGuard(Arc<ConnState>);

impl RequestGuard {
    fn begin(state: &Arc<ConnState>) -> Self {
        state.on_request();
        Self(Arc::clone(state))
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.on_response_done();
    }
}

/// Notes a request the client abandoned: dropped before the router
/// answered it (a reset stream's handler is dropped), or its answer dropped
/// before its end (the handler saw the reset as a failed body read and
/// answered, but the answer had nowhere to go).
struct CancelWatch {
    state: Arc<ConnState>,
    max_cancelled: u32,
    done: bool,
}

impl Drop for CancelWatch {
    fn drop(&mut self) {
        if !self.done {
            self.state.on_cancelled(self.max_cancelled);
        }
    }
}

/// A response body that keeps its request busy until it is dropped.
struct GuardedBody {
    body: Body,
    _guard: RequestGuard,
    watch: CancelWatch,
}

impl Drop for GuardedBody {
    fn drop(&mut self) {
        if hyper::body::Body::is_end_stream(&self.body) {
            self.watch.done = true;
        }
    }
}

impl hyper::body::Body for GuardedBody {
    type Data = <Body as hyper::body::Body>::Data;
    type Error = <Body as hyper::body::Body>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.watch.done = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The connection's byte stream (TCP or TLS), noting when bytes arrive
/// and whether they open with the HTTP/2 preface.
struct Tracked<IO> {
    io: IO,
    state: Arc<ConnState>,
    /// Bytes of the preface matched so far; `None` once decided.
    preface: Option<usize>,
}

impl<IO> Tracked<IO> {
    fn sniff(&mut self, bytes: &[u8]) {
        let Some(matched) = self.preface else {
            return;
        };
        let expected = &HTTP2_PREFACE[matched..];
        let n = bytes.len().min(expected.len());
        self.preface = if bytes[..n] != expected[..n] {
            None
        } else if matched + n == HTTP2_PREFACE.len() {
            self.state.on_http2();
            None
        } else {
            Some(matched + n)
        };
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Tracked<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.sniff(&buf.filled()[before..]);
            self.state.on_bytes_read();
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Tracked<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// Serves HTTP/1.1 and HTTP/2 on `io` until the client closes, a timeout
/// expires, the listener evicts it, or the server stops.
pub(crate) async fn serve<IO>(
    io: IO,
    state: Arc<ConnState>,
    router: Router,
    limits: ConnectionLimits,
    mut stop: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(Tracked {
        io,
        state: Arc::clone(&state),
        preface: Some(0),
    });
    let requests = Arc::clone(&state);
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let guard = RequestGuard::begin(&requests);
        let request = body_deadline::guard(request, &limits);
        let router = router.clone();
        let watch = CancelWatch {
            state: Arc::clone(&requests),
            max_cancelled: limits.max_cancelled_requests,
            done: false,
        };
        async move {
            let Ok(response) = router.oneshot(request).await;
            Ok::<_, Infallible>(response.map(|body| GuardedBody {
                body,
                _guard: guard,
                watch,
            }))
        }
    });
    let builder = builder(&limits);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    loop {
        let deadline = state.deadline(&limits);
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(error) = served {
                    tracing::debug!(%error, "HTTP connection ended with an error");
                }
                state.on_closed();
                return;
            }
            () = sleep_until(deadline) => {
                if state.deadline(&limits).is_some_and(|d| d <= Instant::now()) {
                    tracing::debug!("closing an HTTP connection: idle or header timeout");
                    break;
                }
            }
            () = state.changed.notified() => {}
            () = state.close.notified() => break,
            () = state.abort.notified() => {
                state.on_closed();
                return;
            }
            _ = stop.wait_for(|stop| *stop) => break,
        }
    }
    // Between requests the connection is dropped at once (closing it); with
    // a request in progress, hyper finishes that response, then closes.
    if state.is_busy() {
        conn.as_mut().graceful_shutdown();
        if let Err(error) = conn.await {
            tracing::debug!(%error, "HTTP connection ended with an error");
        }
    }
    state.on_closed();
}

/// hyper's HTTP/1 and HTTP/2 settings. hyper's own HTTP/2 reset limits
/// are set explicitly, so that a hyper upgrade cannot loosen them: streams
/// the client resets before the server even accepted them (20, h2's
/// default) and streams the server itself had to reset for protocol errors
/// (1024, hyper's default); past either hyper sends GOAWAY.
fn builder(limits: &ConnectionLimits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http2()
        .max_concurrent_streams(limits.http2_max_streams)
        .max_pending_accept_reset_streams(20)
        .max_local_error_reset_streams(1024);
    builder
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
