//! `GET /v1/whoami`: the request's token, its name and scopes, so that the
//! dashboard shows only what the token may read and disables the actions it
//! may not take (an addition to api.md, which leaves the way a client
//! learns its scopes open).

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};

use delayd_api::Whoami;

use crate::access::Grant;
use crate::keyring::Principal;
use crate::state::AppState;

#[utoipa::path(get, path = "/v1/whoami", tag = "auth",
    responses((status = 200, body = Whoami,
        description = "The token's name and scopes (`[\"*:*\"]` for a full-access token or a server without tokens)")))]
pub async fn whoami(
    State(state): State<AppState>,
    principal: Option<Extension<Arc<Principal>>>,
) -> Json<Whoami> {
    let (name, scopes) = match &principal {
        Some(Extension(principal)) => (principal.name.clone(), principal.grant.scope_texts()),
        None => (None, Grant::Full.scope_texts()),
    };
    Json(Whoami {
        name,
        scopes,
        auth: state.options.auth_required(),
    })
}
