//! A server for trying the dashboard and for the browser tests until
//! `delayd serve` wires it in: delayd's HTTP API plus the dashboard, on an
//! in-memory `ModelBroker` (nothing is kept on exit).
//!
//! ```text
//! cargo run -p delayd-ui --example ui_demo_server -- 127.0.0.1:7070 [TOKEN]
//! ```
//!
//! With a TOKEN, `/v1` and `/metrics` need `Authorization: Bearer TOKEN`
//! (the dashboard asks for it once).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use delayd_core::testkit::ModelBroker;
use delayd_core::Broker;
use delayd_server::ServerOptions;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:7070".into())
        .parse()?;
    let token = args.next();
    let broker: Arc<dyn Broker> = Arc::new(ModelBroker::new());
    let options = ServerOptions {
        tokens: token.iter().cloned().collect(),
        ..ServerOptions::default()
    };
    // The server applies its auth layer to its own routes only; the
    // dashboard's extra endpoints get the same check here (the real server
    // merges them behind its layer).
    let extra = delayd_ui::api_router()
        .with_state(broker.clone())
        .layer(middleware::from_fn(move |request, next| {
            require(token.clone(), request, next)
        }));
    let app = delayd_server::app(broker, options)
        .merge(extra)
        .merge(delayd_ui::ui_router());
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("dashboard: http://{}/ui", listener.local_addr()?);
    delayd_server::serve_http(listener, app, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}

async fn require(token: Option<String>, request: Request, next: Next) -> Response {
    let expected = token.map(|t| format!("Bearer {t}"));
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match expected {
        Some(expected) if presented != Some(expected.as_str()) => (
            StatusCode::UNAUTHORIZED,
            axum::Json(serde_json::json!({
                "error": {"code": "unauthorized", "message": "a valid bearer token is required"}
            })),
        )
            .into_response(),
        _ => next.run(request).await,
    }
}
