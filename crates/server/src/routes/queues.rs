//! Queue endpoints: create/update (merge), list, get, delete, pause, resume.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use delayd_core::Upsert;

use delayd_api::{Queue, QueueList, QueuePutBody};

use crate::access::ScopeVerb;
use crate::convert::{self, queue_patch};
use crate::error::{ApiResult, ErrorBody};
use crate::extract::{QueuePath, StrictJson};
use crate::keyring::Principal;
use crate::state::AppState;

#[utoipa::path(put, path = "/v1/queues/{queue}", tag = "queues",
    params(("queue" = String, Path, description = "Queue name")),
    request_body = QueuePutBody,
    responses((status = 201, body = Queue, description = "Created"),
        (status = 200, body = Queue, description = "Updated"),
        (status = 400, body = ErrorBody)))]
pub async fn put_queue(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
    StrictJson(body): StrictJson<QueuePutBody>,
) -> ApiResult<(StatusCode, Json<Queue>)> {
    let patch = queue_patch(body, &state.push_allow, state.options.max_delay_ms)?;
    let (upsert, info) = state.broker.put_queue(&queue, patch).await?;
    let status = match upsert {
        Upsert::Created => StatusCode::CREATED,
        Upsert::Updated => StatusCode::OK,
    };
    Ok((status, Json(convert::queue(info))))
}

#[utoipa::path(get, path = "/v1/queues", tag = "queues",
    responses((status = 200, body = QueueList,
        description = "The queues the token may `read` (all of them without scoped tokens)")))]
pub async fn list_queues(
    State(state): State<AppState>,
    principal: Option<Extension<Arc<Principal>>>,
) -> ApiResult<Json<QueueList>> {
    let readable = |name: &str| {
        principal
            .as_ref()
            .is_none_or(|Extension(p)| p.grant.allows(ScopeVerb::Read, name))
    };
    let queues = state.broker.list_queues().await?;
    Ok(Json(QueueList {
        queues: queues
            .into_iter()
            .filter(|info| readable(info.name.as_str()))
            .map(convert::queue)
            .collect(),
    }))
}

#[utoipa::path(get, path = "/v1/queues/{queue}", tag = "queues",
    params(("queue" = String, Path, description = "Queue name")),
    responses((status = 200, body = Queue), (status = 404, body = ErrorBody)))]
pub async fn get_queue(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
) -> ApiResult<Json<Queue>> {
    Ok(Json(convert::queue(state.broker.get_queue(&queue).await?)))
}

#[utoipa::path(delete, path = "/v1/queues/{queue}", tag = "queues",
    params(("queue" = String, Path, description = "Queue name")),
    responses((status = 204, description = "Deleted with all its messages"),
        (status = 404, body = ErrorBody)))]
pub async fn delete_queue(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
) -> ApiResult<StatusCode> {
    state.broker.delete_queue(&queue).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/queues/{queue}/pause", tag = "queues",
    params(("queue" = String, Path, description = "Queue name")),
    responses((status = 200, body = Queue), (status = 404, body = ErrorBody)))]
pub async fn pause(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
) -> ApiResult<Json<Queue>> {
    Ok(Json(convert::queue(
        state.broker.pause(&queue, None).await?,
    )))
}

#[utoipa::path(post, path = "/v1/queues/{queue}/resume", tag = "queues",
    params(("queue" = String, Path, description = "Queue name")),
    responses((status = 200, body = Queue), (status = 404, body = ErrorBody)))]
pub async fn resume(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
) -> ApiResult<Json<Queue>> {
    Ok(Json(convert::queue(state.broker.resume(&queue).await?)))
}
