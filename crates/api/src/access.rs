//! `GET /v1/whoami`: what the request's token may do, so that a client
//! (the dashboard) can show only what it may read and disable the actions
//! it may not take.

use serde::{Deserialize, Serialize};

/// The token's name and scopes (`VERB:QUEUE_GLOB`, api.md "Scoped
/// tokens"). A full-access token (`--token`), and every request to a
/// server without tokens, has the name `null` and the scopes `["*:*"]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Whoami {
    /// The `name` of its `[[token]]` table in `--token-file`.
    pub name: Option<String>,
    /// Each scope as written in the file (`publish:orders-*`, `read:*`).
    pub scopes: Vec<String>,
    /// Whether the server requires a token at all.
    #[serde(default)]
    pub auth: bool,
}
