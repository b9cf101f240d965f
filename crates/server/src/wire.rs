//! Wire types: the JSON bodies are `delayd_api`'s, shared with the client
//! and the dashboard so the three cannot disagree; `convert` turns them
//! into core types and back explicitly (the wire is a compatibility
//! promise, the core model is free to change). What stays here is only
//! the server's: query-string parameters.

use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

/// `GET /v1/queues/{queue}/dead` query parameters. Unknown parameters are
/// refused, as unknown body fields are.
#[derive(Debug, Default, Deserialize, ToSchema, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeadQuery {
    /// 1..=1000, default 100.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// The id of the last message of the previous page.
    pub after: Option<String>,
}
