//! delayd's HTTP API (api.md v1) over any [`Broker`]: routes, auth,
//! metrics, the OpenAPI document and graceful shutdown.
//!
//! The crate takes ready-made inputs, an `Arc<dyn Broker>` and
//! [`ServerOptions`] (limits, tokens, push allowlist), and knows nothing of
//! stores, files, flags or signals: the `delayd` binary resolves `delayd
//! serve`'s configuration, opens the store and decides when to stop.
//!
//! # Layout
//! - [`app`] builds the axum router; [`serve_http`] serves it on an
//!   [`HttpListener`] with graceful shutdown; [`serve_until`] adds the
//!   shutdown order (stop accepting, drain in-flight requests, shut the
//!   broker down) once a caller-given future resolves.
//! - `listener`: the accept loop (connection limit, closing the longest-idle
//!   connection at it, accept failures, TLS handshakes, stopping);
//!   `connection`: one connection's phase and its header and idle timeouts;
//!   `body_deadline`: the request body's timeout and minimum rate;
//!   `tls`: [`TlsConfig`] (rustls).
//! - `state`: the router's shared state (the broker, the options, the
//!   server's own counters).
//! - `routes`: one file per resource (queues, messages, consume, dead,
//!   keys, schedules, ops, and `dashboard`: the two read-only endpoints the
//!   `/ui` page reads; `/` redirects to `/ui`), the
//!   route table and the OpenAPI document generated from the handlers'
//!   annotations (plus, from one modifier, what holds for every route:
//!   error answers, public routes, path parameter grammar). The page's
//!   files themselves come from `delayd_ui`.
//! - `wire`: query DTOs; the JSON bodies are `delayd_api`'s (separate from core
//!   types); `convert`: checks and conversions from DTOs to core requests;
//!   `schedule_convert`: the same for recurring schedules (and the
//!   schedule object back).
//! - `extract`: strict JSON/query/path extractors that answer in api.md's
//!   error shape; `body_error`: the words of a 400 for a body of the wrong
//!   shape (the field's path and what it must be); [`error`]: the single
//!   mapping from failures to status and code.
//! - `auth`: who sent a request (bearer tokens; 401 otherwise), before
//!   routing; `keyring`: the tokens by their SHA-256 digest, compared in
//!   constant time, with [`TokenFile`] (`--token-file`, parsed) and
//!   [`ScopedTokens`] (the handle its reload swaps); `access`: scopes
//!   (`VERB:QUEUE_GLOB`), the one table of what every route needs, and
//!   the 403 check the per-request middleware runs after routing.
//! - `metrics` (Prometheus recorder,
//!   request metrics, queue gauges), `shutdown` (in-flight tracking and the
//!   shutdown order), `options` ([`ServerOptions`]); the push target
//!   allowlist is `delayd_push::PushPolicy`.
//! - `per_request`: the one middleware of every route, doing the request
//!   metrics, the 408 of a body past its deadline, the 413 of an oversized
//!   `Content-Length`, the 403 of a scoped token without the route's
//!   scope and the in-flight count (the rules stay in `metrics`,
//!   `body_deadline`, `extract`, `access` and `shutdown`).
//!
//! # Example
//!
//! The router over a broker (here the in-memory reference model), answering
//! one request without a network; [`serve_until`] serves the same router on
//! a listener.
//!
//! ```
//! use std::sync::Arc;
//!
//! use axum::body::Body;
//! use axum::http::{Request, StatusCode};
//! use delayd_core::testkit::ModelBroker;
//! use delayd_server::{app, ServerOptions};
//! use tower::ServiceExt as _;
//!
//! let router = app(Arc::new(ModelBroker::new()), ServerOptions::default());
//! let request = Request::post("/v1/queues/orders/messages")
//!     .header("content-type", "application/json")
//!     .body(Body::from(r#"{"payload": "close order 42", "delay_ms": 1800000}"#))
//!     .expect("a valid request");
//! let runtime = tokio::runtime::Runtime::new().expect("runtime");
//! let response = runtime.block_on(router.oneshot(request)).expect("infallible");
//! assert_eq!(response.status(), StatusCode::CREATED);
//! ```

mod access;
mod auth;
mod body_deadline;
mod body_error;
mod connection;
mod convert;
pub mod error;
mod extract;
mod keyring;
mod listener;
pub mod metrics;
mod options;
mod per_request;
mod routes;
mod schedule_convert;
mod shutdown;
mod state;
mod tls;
mod wire;

use std::future::Future;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::Router;
use delayd_core::Broker;
use tower_http::trace::TraceLayer;

pub use access::{QueueGlob, Scope, ScopeVerb};
pub use keyring::{token_digest, ScopedTokens, TokenFile, TokenFileError};
pub use listener::{
    serve_http, ConnectionLimits, HttpListener, DEFAULT_BODY_MIN_RATE, DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT, DEFAULT_HTTP2_MAX_STREAMS, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_CANCELLED_REQUESTS, DEFAULT_MAX_CONNECTIONS,
};
pub use options::{
    ServerOptions, DEFAULT_MAX_BATCH, DEFAULT_MAX_BODY, DEFAULT_MAX_DELAY_MS, DEFAULT_MAX_PAYLOAD,
    DEFAULT_MAX_WAIT_MS,
};
pub use routes::ApiDoc;
pub use shutdown::DRAIN_TIMEOUT;
pub use tls::{TlsConfig, TlsError};

use crate::shutdown::InFlight;
use crate::state::AppState;
use delayd_push::PushPolicy;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("HTTP server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// The HTTP API over `broker`. Invalid `push_allow` entries are logged and
/// ignored here (nothing they would allow is allowed); the `delayd serve`
/// configuration refuses them before a server is built.
pub fn app(broker: Arc<dyn Broker>, options: ServerOptions) -> Router {
    build(broker, options).0
}

fn build(broker: Arc<dyn Broker>, options: ServerOptions) -> (Router, Arc<InFlight>) {
    let push_allow = PushPolicy::new(&options.push_allow).unwrap_or_else(|err| {
        tracing::error!(%err, "invalid push allowlist; no push target is allowed");
        PushPolicy::default()
    });
    let in_flight = Arc::new(InFlight::default());
    let tokens = auth::Tokens::new(&options.tokens, options.scoped_tokens.clone());
    let max_body = options.max_body;
    let state = AppState::new(state::Shared {
        broker,
        options: Arc::new(options),
        push_allow: Arc::new(push_allow),
        metrics: metrics::handle(),
        in_flight: in_flight.clone(),
        exported_queues: Arc::default(),
    });
    // Layers run outside-in from the last added: trace, auth, error bodies,
    // panics, then (per route, where the route template is known) one
    // middleware for metrics, the 408 of a body past its deadline, the
    // Content-Length check, the scope check and in-flight tracking
    // (`per_request`), and
    // panics again. The inner
    // panic catcher makes a handler's panic an ordinary 500 that the metrics
    // count and in-flight tracking sees end; the outer one covers the
    // middleware outside the routes.
    // The dashboard's page and assets (/ui) need no token: all data they
    // show comes from /v1. `/`, the address a person types, leads there
    // (307, not 308: a browser keeps a permanent redirect for good, and `/`
    // may serve something else one day).
    let router = routes::router()
        .merge(delayd_ui::ui_router().with_state::<AppState>(()))
        .route(
            "/",
            axum::routing::get(|| async { axum::response::Redirect::temporary("/ui") }),
        )
        .fallback(|| async { error::ApiError::from_status(axum::http::StatusCode::NOT_FOUND) })
        .layer(tower_http::catch_panic::CatchPanicLayer::new())
        .layer(middleware::from_fn_with_state(
            per_request::PerRequest {
                in_flight: in_flight.clone(),
                max_body,
            },
            per_request::per_request,
        ))
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(state);
    let router = with_error_answers(router)
        .layer(middleware::from_fn_with_state(tokens, auth::require_token))
        .layer(TraceLayer::new_for_http());
    (router, in_flight)
}

/// The answers failures get: a panic in a handler (a bug) is 500
/// `internal` instead of a dropped connection (the panic itself goes to
/// stderr), and every error axum or tower produce on their own gets
/// api.md's JSON body.
fn with_error_answers(router: Router) -> Router {
    router
        .layer(tower_http::catch_panic::CatchPanicLayer::new())
        .layer(middleware::from_fn(error::json_errors))
}

/// Serves the API on `listener` until `signal`, then: stops accepting, lets
/// in-flight requests finish (up to [`DRAIN_TIMEOUT`]), shuts the broker
/// down (waiting lease calls return empty lists) and returns.
pub async fn serve_until(
    listener: impl Into<HttpListener>,
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

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::routing::get;
    use tower::ServiceExt as _;

    async fn boom() -> &'static str {
        panic!("a bug")
    }

    #[tokio::test]
    async fn a_handler_panic_answers_500_internal_in_the_error_shape() {
        let router = super::with_error_answers(axum::Router::new().route("/boom", get(boom)));
        let request = Request::get("/boom").body(Body::empty()).expect("request");
        let response = router.oneshot(request).await.expect("infallible");
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        let body: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
        assert_eq!(body["error"]["code"], "internal", "{body}");
    }
}
