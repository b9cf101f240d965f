//! Queue endpoints: create/update (merge), list, get, delete, pause, resume.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use delayd_core::Upsert;

use crate::convert::queue_patch;
use crate::error::{ApiResult, ErrorBody};
use crate::extract::{QueuePath, StrictJson};
use crate::state::AppState;
use crate::wire::{QueueDto, QueueList, QueuePutBody};

#[utoipa::path(put, path = "/v1/queues/{queue}", tag = "queues",
    params(("queue" = String, Path, description = "Queue name")),
    request_body = QueuePutBody,
    responses((status = 201, body = QueueDto, description = "Created"),
        (status = 200, body = QueueDto, description = "Updated"),
        (status = 400, body = ErrorBody)))]
pub async fn put_queue(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
    StrictJson(body): StrictJson<QueuePutBody>,
) -> ApiResult<(StatusCode, Json<QueueDto>)> {
    let patch = queue_patch(body, &state.push_allow)?;
    let (upsert, info) = state.broker.put_queue(&queue, patch).await?;
    let status = match upsert {
        Upsert::Created => StatusCode::CREATED,
        Upsert::Updated => StatusCode::OK,
    };
    Ok((status, Json(info.into())))
}

#[utoipa::path(get, path = "/v1/queues", tag = "queues",
    responses((status = 200, body = QueueList)))]
pub async fn list_queues(State(state): State<AppState>) -> ApiResult<Json<QueueList>> {
    let queues = state.broker.list_queues().await?;
    Ok(Json(QueueList {
        queues: queues.into_iter().map(QueueDto::from).collect(),
    }))
}

#[utoipa::path(get, path = "/v1/queues/{queue}", tag = "queues",
    params(("queue" = String, Path, description = "Queue name")),
    responses((status = 200, body = QueueDto), (status = 404, body = ErrorBody)))]
pub async fn get_queue(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
) -> ApiResult<Json<QueueDto>> {
    Ok(Json(state.broker.get_queue(&queue).await?.into()))
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
    responses((status = 200, body = QueueDto), (status = 404, body = ErrorBody)))]
pub async fn pause(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
) -> ApiResult<Json<QueueDto>> {
    Ok(Json(state.broker.pause(&queue, None).await?.into()))
}

#[utoipa::path(post, path = "/v1/queues/{queue}/resume", tag = "queues",
    params(("queue" = String, Path, description = "Queue name")),
    responses((status = 200, body = QueueDto), (status = 404, body = ErrorBody)))]
pub async fn resume(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
) -> ApiResult<Json<QueueDto>> {
    Ok(Json(state.broker.resume(&queue).await?.into()))
}
