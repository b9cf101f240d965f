//! Bearer-token auth for `/v1/*` and `/metrics` when tokens are configured.
//! `/healthz`, `/readyz` and `/openapi.json` stay open (probes and docs).
//!
//! This layer only says who sent the request (401 when nobody valid did)
//! and puts the [`Principal`] in the request's extensions; what the
//! principal may do on the matched route is decided after routing, in the
//! per-request middleware (`access::authorize`), where the route's
//! template is known.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::keyring::{token_digest, FullTokens, Principal, ScopedTokens};

/// The tokens the server accepts.
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    full: Arc<FullTokens>,
    scoped: Option<ScopedTokens>,
    /// Any `--token` or a `--token-file` (even an empty one) turns auth on.
    on: bool,
}

impl Tokens {
    pub fn new(full: &[String], scoped: Option<ScopedTokens>) -> Self {
        Self {
            full: Arc::new(FullTokens::new(full)),
            on: !full.is_empty() || scoped.is_some(),
            scoped,
        }
    }

    /// Who `presented` belongs to. Hashed once; both sets are asked (no
    /// shortcut when the first one knows it), each in constant time.
    fn identify(&self, presented: &[u8]) -> Option<Arc<Principal>> {
        let digest = token_digest(presented);
        let full = self.full.lookup(&digest);
        let scoped = self.scoped.as_ref().and_then(|s| s.lookup(&digest));
        full.or(scoped)
    }
}

/// Whether a request to `path` needs the token (when tokens are set). The
/// OpenAPI document's per-route `security` follows this too.
pub(crate) fn needs_auth(path: &str) -> bool {
    path == "/metrics" || path == "/v1" || path.starts_with("/v1/")
}

/// The token of an `Authorization: Bearer <token>` header; any other form
/// (no header, another scheme, no token after the scheme) is none.
fn bearer(request: &Request) -> Option<&str> {
    let value = request.headers().get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

pub async fn require_token(
    State(tokens): State<Tokens>,
    mut request: Request,
    next: Next,
) -> Response {
    if !tokens.on || !needs_auth(request.uri().path()) {
        return next.run(request).await;
    }
    match bearer(&request).and_then(|token| tokens.identify(token.as_bytes())) {
        Some(principal) => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        None => ApiError::unauthorized().into_response(),
    }
}
