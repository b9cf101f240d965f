//! The HTTP accept loop: the connection limit, what happens at it, accept
//! failures, TLS handshakes, and stopping.
//!
//! At the limit the listener closes the connection that has been idle
//! longest (no request in progress) to admit the new one, as nginx reuses
//! idle keep-alive connections when it runs out: a flood of idle or
//! slow-header connections then only ever displaces itself, and a client
//! with a request to make is served. (A flood of requests with slowly sent
//! bodies is busy, not idle, and is not displaced: the body deadline of
//! `body_deadline` closes them instead.) Only when every connection is busy
//! with a request does a new one get a quick `503` and close; refusing
//! outright whenever full would let idle connections lock every client out
//! until they time out.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use delayd_core::accept::AcceptBackoff;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::connection::{self, ConnState, Registry};
use crate::error::ApiError;
use crate::metrics::{
    HTTP_CONNECTIONS, HTTP_CONNECTIONS_EVICTED_TOTAL, HTTP_CONNECTIONS_REFUSED_TOTAL,
    HTTP_MAX_CONNECTIONS,
};
use crate::tls::TlsConfig;

/// Default most open HTTP connections (`delayd serve` derives its own from
/// the process's file-descriptor limit).
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Default time a client has to send a request head once it started one
/// (and a new connection's TLS handshake).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time a connection may sit with no request before it is closed.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default time a request body may take beyond what its size earns at the
/// minimum rate (Apache's `RequestReadTimeout body=20,MinRate=500`).
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(20);
/// Default bytes per second of request body that each earn a second more.
pub const DEFAULT_BODY_MIN_RATE: u64 = 500;
/// Default most concurrent HTTP/2 streams (requests) on one connection: a
/// connection holds one slot of the connection limit, so it should not
/// carry hundreds of requests.
pub const DEFAULT_HTTP2_MAX_STREAMS: u32 = 100;
/// Default most requests a client may cancel (HTTP/2 RST_STREAM) on one
/// connection within 10 seconds before the connection is closed.
pub const DEFAULT_MAX_CANCELLED_REQUESTS: u32 = 200;

/// How long the accept loop waits for an evicted connection to free its
/// slot before refusing the new one instead.
const EVICTION_WAIT: Duration = Duration::from_millis(500);
/// After stop, how long connections with a request in progress may take
/// before they are cut (api.md: the process exits within 10 seconds; the
/// broker's shutdown ends lease waits well before this).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(9);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most open connections; at the limit the longest-idle one is closed
    /// to admit a new one (see the module docs).
    pub max_connections: usize,
    /// From the first byte of a request head (or a TLS handshake's start)
    /// to its end.
    pub header_timeout: Duration,
    /// A connection with no request in progress and no byte of the next one
    /// is closed after this long (this includes a new connection).
    pub idle_timeout: Duration,
    /// A request body must arrive within this long from the end of its
    /// head, plus a second per `body_min_rate` bytes received; slower ones
    /// are answered 408 and their connection closed (see `body_deadline`).
    pub body_timeout: Duration,
    /// Bytes per second of body that earn a second more; 0: none do.
    pub body_min_rate: u64,
    /// Most concurrent HTTP/2 streams on one connection (advertised in
    /// SETTINGS_MAX_CONCURRENT_STREAMS).
    pub http2_max_streams: u32,
    /// Requests a client may cancel before their answer within 10 seconds
    /// on one connection; one more closes the connection (the HTTP/2
    /// "rapid reset" flood: each cancelled stream still cost a handler
    /// start, and does not count against the concurrent streams).
    pub max_cancelled_requests: u32,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            body_min_rate: DEFAULT_BODY_MIN_RATE,
            http2_max_streams: DEFAULT_HTTP2_MAX_STREAMS,
            max_cancelled_requests: DEFAULT_MAX_CANCELLED_REQUESTS,
        }
    }
}

/// A bound socket with its connection limits and, for HTTPS, its
/// certificate. A plain `TcpListener` converts with the default limits.
pub struct HttpListener {
    tcp: TcpListener,
    limits: ConnectionLimits,
    tls: Option<TlsConfig>,
    budget: Option<Arc<Semaphore>>,
}

impl From<TcpListener> for HttpListener {
    fn from(tcp: TcpListener) -> Self {
        Self {
            tcp,
            limits: ConnectionLimits::default(),
            tls: None,
            budget: None,
        }
    }
}

impl HttpListener {
    pub fn with_limits(mut self, limits: ConnectionLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Serves HTTPS instead of plain HTTP.
    pub fn with_tls(mut self, tls: TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Each connection also holds a permit of `budget`, a limit shared with
    /// other listeners (`delayd serve`'s `--max-connections` over HTTP and
    /// beanstalkd). When it is spent, the longest-idle HTTP connection is
    /// closed as at this listener's own limit, else the new one gets 503.
    pub fn with_shared_budget(mut self, budget: Arc<Semaphore>) -> Self {
        self.budget = Some(budget);
        self
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

/// What every connection task of one listener shares.
struct Shared {
    router: Router,
    limits: ConnectionLimits,
    tls: Option<TlsConfig>,
    registry: Arc<Registry>,
    slots: Arc<Semaphore>,
    /// The limit shared with other listeners, if any.
    budget: Option<Arc<Semaphore>>,
}

/// A connection's place: one of the listener's slots, and a permit of the
/// shared budget when there is one. Held until the connection closes.
struct Slot {
    _own: OwnedSemaphorePermit,
    _shared: Option<OwnedSemaphorePermit>,
}

impl Shared {
    fn try_slot(&self) -> Option<Slot> {
        let own = Arc::clone(&self.slots).try_acquire_owned().ok()?;
        let shared = match &self.budget {
            Some(budget) => Some(Arc::clone(budget).try_acquire_owned().ok()?),
            None => None,
        };
        Some(Slot {
            _own: own,
            _shared: shared,
        })
    }

    /// Waits for a slot (the semaphores are never closed: `None` is only
    /// for form).
    async fn slot(&self) -> Option<Slot> {
        let own = Arc::clone(&self.slots).acquire_owned().await.ok()?;
        let shared = match &self.budget {
            Some(budget) => Some(Arc::clone(budget).acquire_owned().await.ok()?),
            None => None,
        };
        Some(Slot {
            _own: own,
            _shared: shared,
        })
    }
}

/// Serves `app` until `shutdown` resolves; then stops accepting, closes
/// connections between requests at once and lets requests in progress
/// finish (long-polling lease calls end only when the broker is shut down;
/// [`crate::serve_until`] orders that).
pub async fn serve_http(
    listener: impl Into<HttpListener>,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let HttpListener {
        tcp,
        limits,
        tls,
        budget,
    } = listener.into();
    let shared = Arc::new(Shared {
        router: app,
        limits,
        tls,
        registry: Arc::default(),
        slots: Arc::new(Semaphore::new(limits.max_connections)),
        budget,
    });
    metrics::gauge!(HTTP_MAX_CONNECTIONS).set(limits.max_connections as f64);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    let mut backoff = AcceptBackoff::new("HTTP");
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = tcp.accept() => match accepted {
                Ok((stream, _)) => {
                    backoff.recovered();
                    if let Some(slot) = admit(&shared, &stream).await {
                        tasks.spawn(run(stream, slot, Arc::clone(&shared), stop_rx.clone()));
                    }
                }
                Err(error) => if let Some(pause) = backoff.failed(&error) {
                    // Out of descriptors: an idle connection's is the one
                    // to give up.
                    shared.registry.evict_oldest();
                    tokio::time::sleep(pause).await;
                },
            },
            Some(_) = tasks.join_next() => {}
        }
    }
    drop(tcp);
    let _ = stop_tx.send(true);
    close_all(tasks).await;
    Ok(())
}

async fn close_all(mut tasks: JoinSet<()>) {
    let drained = tokio::time::timeout(CLOSE_TIMEOUT, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = tasks.len(),
            "HTTP connections still busy at the close timeout; cutting them"
        );
        tasks.shutdown().await;
    }
}

/// A slot for `stream`, evicting the longest-idle connection when full;
/// `None` (the stream answered 503) when every connection is busy.
async fn admit(shared: &Shared, stream: &TcpStream) -> Option<Slot> {
    if let Some(slot) = shared.try_slot() {
        return Some(slot);
    }
    if shared.registry.evict_oldest() {
        metrics::counter!(HTTP_CONNECTIONS_EVICTED_TOTAL).increment(1);
        if let Ok(Some(slot)) = tokio::time::timeout(EVICTION_WAIT, shared.slot()).await {
            return Some(slot);
        }
    }
    metrics::counter!(HTTP_CONNECTIONS_REFUSED_TOTAL).increment(1);
    if shared.tls.is_none() {
        refuse(stream);
    }
    None
}

/// Answers 503 without waiting: what the client sent so far is read first
/// (closing with unread input would reset the connection and could discard
/// the answer), and the answer fits in the socket's send buffer.
fn refuse(stream: &TcpStream) {
    let mut sink = [0u8; 4096];
    while matches!(stream.try_read(&mut sink), Ok(n) if n > 0) {}
    let error = ApiError::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        "too many connections, all busy; retry shortly",
    );
    let body = serde_json::to_string(&error.body()).unwrap_or_default();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(answer.as_bytes());
}

/// One connection's task: the TLS handshake if any, then HTTP. The slot is
/// held until the connection is closed.
async fn run(stream: TcpStream, slot: Slot, shared: Arc<Shared>, stop: watch::Receiver<bool>) {
    let _open = OpenConnection::count(slot);
    // Small JSON answers must not wait for Nagle's delayed ACK.
    let _ = stream.set_nodelay(true);
    let state = ConnState::open(&shared.registry);
    let (router, limits) = (shared.router.clone(), shared.limits);
    match &shared.tls {
        None => connection::serve(stream, state, router, limits, stop).await,
        Some(tls) => {
            let handshake = tls.acceptor().accept(stream);
            match tokio::time::timeout(limits.header_timeout, handshake).await {
                Ok(Ok(tls_stream)) => {
                    connection::serve(tls_stream, state, router, limits, stop).await;
                }
                Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
                Err(_) => tracing::debug!("TLS handshake timed out"),
            }
        }
    }
}

/// Counts an open connection in the gauge and holds its slot until drop.
struct OpenConnection(#[expect(dead_code, reason = "held for its Drop")] Slot);

impl OpenConnection {
    fn count(slot: Slot) -> Self {
        metrics::gauge!(HTTP_CONNECTIONS).increment(1.0);
        Self(slot)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        metrics::gauge!(HTTP_CONNECTIONS).decrement(1.0);
    }
}
