//! The per-request work every route shares, in one middleware (each
//! `from_fn` layer boxes a future and clones the service stack below it
//! per request, so four layers cost more than one that does the four
//! jobs). From the outside in, as the separate layers did:
//! - the request counter and latency histogram (`metrics`), of every
//!   answer including the ones below;
//! - the 408 of a body that missed its deadline (`body_deadline`);
//! - the 413 of a declared `Content-Length` over the cap (`extract`),
//!   before a byte of the body is read;
//! - the in-flight count that graceful shutdown waits for (`shutdown`);
//! - the 403 of a scoped token without the scope the route needs
//!   (`access`; the token itself was checked before routing, in `auth`).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};

use crate::keyring::Principal;
use crate::shutdown::InFlight;
use crate::{access, body_deadline, extract, metrics, shutdown};

/// What the per-request middleware needs.
#[derive(Clone)]
pub(crate) struct PerRequest {
    pub in_flight: Arc<InFlight>,
    pub max_body: usize,
}

pub(crate) async fn per_request(
    State(ctx): State<PerRequest>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let route = request.extensions().get::<MatchedPath>().cloned();
    let method = request.method().clone();
    let too_slow = body_deadline::too_slow_flag(&request);
    let version = request.version();
    let response = match extract::oversized(request.headers(), ctx.max_body) {
        Some(refused) => refused,
        None => match forbidden(&request, route.as_ref()) {
            Some(refused) => refused,
            None => {
                let _counted = shutdown::enter(&ctx.in_flight, route.as_ref());
                next.run(request).await
            }
        },
    };
    let response = body_deadline::answer_if_too_slow(too_slow, version, response);
    metrics::record_request(route.as_ref(), &method, response.status(), started);
    response
}

/// The 403 of a request whose token lacks what its route needs. No
/// principal: auth is off (the `auth` layer puts one on every request it
/// lets through to a route that needs a token).
fn forbidden(request: &Request, route: Option<&MatchedPath>) -> Option<Response> {
    let principal = request.extensions().get::<Arc<Principal>>()?;
    let route = route?;
    access::authorize(
        &principal.grant,
        request.method(),
        route.as_str(),
        request.uri().path(),
    )
    .err()
    .map(|refused| refused.into_response())
}
