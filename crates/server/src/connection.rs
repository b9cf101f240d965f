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

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
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
    registry: Arc<Registry>,
}

impl ConnState {
    /// A new connection counts as idle (evictable) until its first request.
    pub(crate) fn open(registry: &Arc<Registry>) -> Arc<Self> {
        let state = Arc::new(Self {
            phase: Mutex::new(Phase::Busy { requests: 0 }),
            changed: Notify::new(),
            close: Notify::new(),
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

/// A response body that keeps its request busy until it is dropped.
struct GuardedBody {
    body: Body,
    _guard: RequestGuard,
}

impl hyper::body::Body for GuardedBody {
    type Data = <Body as hyper::body::Body>::Data;
    type Error = <Body as hyper::body::Body>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The connection's byte stream (TCP or TLS), noting when bytes arrive.
struct Tracked<IO> {
    io: IO,
    state: Arc<ConnState>,
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
    });
    let requests = Arc::clone(&state);
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let guard = RequestGuard::begin(&requests);
        let request = body_deadline::guard(request, &limits);
        let router = router.clone();
        async move {
            let Ok(response) = router.oneshot(request).await;
            Ok::<_, Infallible>(response.map(|body| GuardedBody {
                body,
                _guard: guard,
            }))
        }
    });
    let builder = auto::Builder::new(TokioExecutor::new());
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

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
