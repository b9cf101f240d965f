//! Flow keys: `GET /v1/queues/{queue}/keys/{key}`, a key's live messages
//! by state and its cooldown (api.md, "Flow control").

use axum::extract::State;
use axum::Json;

use delayd_api::KeyInfo;

use crate::convert;
use crate::error::{ApiResult, ErrorBody};
use crate::extract::KeyPath;
use crate::state::AppState;

#[utoipa::path(get, path = "/v1/queues/{queue}/keys/{key}", tag = "flow",
    params(("queue" = String, Path, description = "Queue name"),
        ("key" = String, Path,
         description = "Flow key (UTF-8, 1 to 256 bytes, no control characters), percent-encoded")),
    responses((status = 200, body = KeyInfo,
        description = "The key's live messages by state and its cooldown; zeros for a key with no live message"),
        (status = 400, body = ErrorBody, description = "A key that breaks its rule"),
        (status = 404, body = ErrorBody, description = "queue_not_found")))]
pub async fn key_info(
    State(state): State<AppState>,
    KeyPath(queue, key): KeyPath,
) -> ApiResult<Json<KeyInfo>> {
    let info = state.broker.key_info(&queue, &key).await?;
    Ok(Json(convert::key_info(info)))
}
