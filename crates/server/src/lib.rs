//! delayd's HTTP API (api.md v1) over any [`Broker`], with its
//! configuration, metrics and graceful shutdown.
//!
//! # Layout
//! - [`app`] builds the axum router; [`serve_http`] serves it with graceful
//!   shutdown; [`serve_until`] and [`run`] add the shutdown order (stop
//!   accepting, drain, shut the broker down) and signal handling.
//! - `routes`: one file per resource (queues, messages, consume, dead, ops,
//!   and `dashboard`: the two read-only endpoints the `/ui` page reads) and
//!   the OpenAPI document generated from the handlers' annotations. The
//!   page's files themselves come from `delayd_ui`.
//! - `wire`: the JSON DTOs (compatibility promises, separate from core
//!   types); `convert`: checks and conversions from DTOs to core requests.
//! - `extract`: strict JSON/query/path extractors that answer in api.md's
//!   error shape; [`error`]: the single mapping from failures to status and
//!   code.
//! - `auth` (bearer tokens, constant time), `metrics` (Prometheus recorder,
//!   request metrics, queue gauges), `shutdown` (in-flight tracking and the
//!   shutdown order), the push target allowlist is `delayd_push::PushPolicy`.
//! - [`config`]: `delayd serve` options: flags, `DELAYD_*` environment, TOML
//!   file, defaults, in that precedence.

#![forbid(unsafe_code)]

mod auth;
pub mod config;
mod convert;
pub mod error;
mod extract;
pub mod metrics;
mod options;
mod routes;
mod shutdown;
mod state;
mod wire;

use std::future::Future;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::Router;
use delayd_core::Broker;
use tower_http::trace::TraceLayer;

pub use config::{DurabilitySetting, ServeArgs, ServeConfig, StoreConfig};
pub use options::{
    ServerOptions, DEFAULT_MAX_BATCH, DEFAULT_MAX_BODY, DEFAULT_MAX_DELAY_MS, DEFAULT_MAX_PAYLOAD,
    DEFAULT_MAX_WAIT_MS,
};
pub use routes::ApiDoc;
pub use shutdown::DRAIN_TIMEOUT;

use crate::shutdown::InFlight;
use crate::state::AppState;
use delayd_push::PushPolicy;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("HTTP server failed: {0}")]
    Serve(#[source] std::io::Error),
    #[error("invalid server options: {0}")]
    Options(String),
}

/// The HTTP API over `broker`. Invalid `push_allow` entries are logged and
/// ignored here (nothing they would allow is allowed); [`run`] refuses them.
pub fn app(broker: Arc<dyn Broker>, options: ServerOptions) -> Router {
    build(broker, options).0
}

fn build(broker: Arc<dyn Broker>, options: ServerOptions) -> (Router, Arc<InFlight>) {
    let push_allow = PushPolicy::new(&options.push_allow).unwrap_or_else(|err| {
        tracing::error!(%err, "invalid push allowlist; no push target is allowed");
        PushPolicy::default()
    });
    let in_flight = Arc::new(InFlight::default());
    let tokens = auth::Tokens(Arc::new(options.tokens.clone()));
    let max_body = options.max_body;
    let state = AppState {
        broker,
        options: Arc::new(options),
        push_allow: Arc::new(push_allow),
        metrics: metrics::handle(),
        in_flight: in_flight.clone(),
        exported_queues: Arc::default(),
    };
    // Layers run outside-in from the last added: trace, auth, error bodies,
    // then (per route, where the route template is known) metrics and
    // in-flight tracking.
    // The dashboard's page and assets (/ui) need no token: all data they
    // show comes from /v1.
    let router = routes::router()
        .merge(delayd_ui::ui_router().with_state::<AppState>(()))
        .fallback(|| async { error::ApiError::from_status(axum::http::StatusCode::NOT_FOUND) })
        .layer(middleware::from_fn_with_state(
            in_flight.clone(),
            shutdown::track,
        ))
        .layer(middleware::from_fn(metrics::track))
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(state)
        .layer(middleware::from_fn(error::json_errors))
        .layer(middleware::from_fn_with_state(tokens, auth::require_token))
        .layer(TraceLayer::new_for_http());
    (router, in_flight)
}

/// Serves `app` until `shutdown` resolves, then stops accepting and waits
/// for open requests. Long-polling lease calls end only when the broker is
/// shut down; [`serve_until`] orders that for you.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Serves the API on `listener` until `signal`, then: stops accepting, lets
/// in-flight requests finish (up to [`DRAIN_TIMEOUT`]), shuts the broker
/// down (waiting lease calls return empty lists) and returns.
pub async fn serve_until(
    listener: tokio::net::TcpListener,
    broker: Arc<dyn Broker>,
    options: ServerOptions,
    signal: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let (router, in_flight) = build(broker.clone(), options);
    let (stop, shutdown_task) = shutdown::orchestrate(signal, in_flight, broker);
    let served = serve_http(listener, router, stop).await;
    // The broker shutdown must complete (making acknowledged writes durable)
    // before we report success.
    if let Err(err) = shutdown_task.await {
        tracing::error!(%err, "shutdown task failed");
    }
    served.map_err(ServerError::Serve)
}

/// `delayd serve`'s HTTP part: binds `config.http`, serves until SIGTERM or
/// SIGINT, shuts down in order, returns `Ok(())` (exit 0).
pub async fn run(config: ServeConfig, broker: Arc<dyn Broker>) -> Result<(), ServerError> {
    PushPolicy::new(&config.options.push_allow)
        .map_err(|err| ServerError::Options(err.to_string()))?;
    let listener = tokio::net::TcpListener::bind(config.http)
        .await
        .map_err(|source| ServerError::Bind {
            addr: config.http,
            source,
        })?;
    let bound = listener.local_addr().map_err(ServerError::Serve)?;
    tracing::info!(%bound, "HTTP API listening");
    serve_until(listener, broker, config.options, termination()).await
}

/// Resolves on SIGTERM or SIGINT (ctrl-c).
async fn termination() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(%err, "cannot listen for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut stream) => {
                stream.recv().await;
            }
            Err(err) => {
                tracing::error!(%err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT received"),
        () = term => tracing::info!("SIGTERM received"),
    }
}
