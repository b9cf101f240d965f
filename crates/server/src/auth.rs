//! Bearer-token auth for `/v1/*` and `/metrics` when tokens are configured.
//! `/healthz`, `/readyz` and `/openapi.json` stay open (probes and docs).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// The configured tokens; empty means auth is off.
#[derive(Clone, Debug, Default)]
pub struct Tokens(pub Arc<Vec<String>>);

impl Tokens {
    /// Compares against every token without stopping at the first match, in
    /// constant time per token, so timing reveals neither which token nor
    /// how much of one matched.
    fn accepts(&self, presented: &[u8]) -> bool {
        let mut ok = subtle::Choice::from(0u8);
        for token in self.0.iter() {
            ok |= token.as_bytes().ct_eq(presented);
        }
        ok.into()
    }
}

/// Whether a request to `path` needs the token (when tokens are set). The
/// OpenAPI document's per-route `security` follows this too.
pub(crate) fn needs_auth(path: &str) -> bool {
    path == "/metrics" || path == "/v1" || path.starts_with("/v1/")
}

pub async fn require_token(State(tokens): State<Tokens>, request: Request, next: Next) -> Response {
    if tokens.0.is_empty() || !needs_auth(request.uri().path()) {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            let (scheme, token) = value.trim().split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| token.trim().to_owned())
        });
    match presented {
        Some(token) if tokens.accepts(token.as_bytes()) => next.run(request).await,
        _ => ApiError::unauthorized().into_response(),
    }
}
