//! Recurring-schedule endpoints: put, get, list, delete, pause, resume,
//! trigger, and the stateless preview.

use std::collections::HashMap;

use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::Json;
use delayd_api::{Enqueued, Preview, PreviewBody, Schedule, ScheduleList, SchedulePutBody};
use delayd_core::{BrokerError, QueueName, ScheduleId, Upsert};

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{QueuePath, StrictJson};
use crate::schedule_convert as convert;
use crate::state::AppState;

/// The `{queue}` and `{id}` path segments of a schedule route, validated
/// (a schedule id has no `:`, unlike a message id).
pub struct SchedulePath(pub QueueName, pub ScheduleId);

impl<S: Send + Sync> FromRequestParts<S> for SchedulePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(params) = Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::invalid_argument(rejection.body_text()))?;
        let (Some(queue), Some(id)) = (params.get("queue"), params.get("id")) else {
            return Err(ApiError::invalid_argument(
                "missing queue or schedule id in path",
            ));
        };
        Ok(SchedulePath(
            QueueName::new(queue.as_str())?,
            ScheduleId::new(id.as_str())?,
        ))
    }
}

#[utoipa::path(put, path = "/v1/queues/{queue}/schedules/{id}", tag = "schedules",
    params(("queue" = String, Path, description = "Queue name"),
        ("id" = String, Path, description = "Schedule id")),
    request_body = SchedulePutBody,
    responses((status = 201, body = Schedule, description = "Created (and the queue, if it did not exist)"),
        (status = 200, body = Schedule, description = "Replaced (the same definition changes nothing: same revision)"),
        (status = 400, body = ErrorBody, description = "invalid_argument, naming the field"),
        (status = 404, body = ErrorBody, description = "queue_not_found with --no-auto-create"),
        (status = 413, body = ErrorBody)))]
pub async fn put_schedule(
    State(state): State<AppState>,
    SchedulePath(queue, id): SchedulePath,
    StrictJson(body): StrictJson<SchedulePutBody>,
) -> ApiResult<(StatusCode, Json<Schedule>)> {
    // A replacing PUT without `start_at` keeps the current one, which the
    // checks need too (`end_at` must be after it). Read, then put: a
    // schedule created in between by another request is replaced with
    // `start_at` = now, as if this request had come first.
    let current_start_at = match body.start_at {
        Some(_) => None,
        None => match state.broker.get_schedule(&queue, &id).await {
            Ok(current) => Some(current.definition.start_at),
            Err(BrokerError::QueueNotFound(_) | BrokerError::ScheduleNotFound { .. }) => None,
            Err(err) => return Err(err.into()),
        },
    };
    let definition = convert::definition(body, current_start_at, &state.limits())?;
    let (upsert, record) = state
        .broker
        .put_schedule(&queue, &id, definition, state.enqueue_options())
        .await?;
    let status = match upsert {
        Upsert::Created => StatusCode::CREATED,
        Upsert::Updated => StatusCode::OK,
    };
    Ok((status, Json(convert::schedule(record))))
}

#[utoipa::path(get, path = "/v1/queues/{queue}/schedules/{id}", tag = "schedules",
    params(("queue" = String, Path, description = "Queue name"),
        ("id" = String, Path, description = "Schedule id")),
    responses((status = 200, body = Schedule),
        (status = 404, body = ErrorBody, description = "queue_not_found or schedule_not_found")))]
pub async fn get_schedule(
    State(state): State<AppState>,
    SchedulePath(queue, id): SchedulePath,
) -> ApiResult<Json<Schedule>> {
    let record = state.broker.get_schedule(&queue, &id).await?;
    Ok(Json(convert::schedule(record)))
}

#[utoipa::path(get, path = "/v1/queues/{queue}/schedules", tag = "schedules",
    params(("queue" = String, Path, description = "Queue name")),
    responses((status = 200, body = ScheduleList, description = "The queue's schedules, by id"),
        (status = 404, body = ErrorBody, description = "queue_not_found")))]
pub async fn list_schedules(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
) -> ApiResult<Json<ScheduleList>> {
    let records = state.broker.list_schedules(&queue).await?;
    let schedules = records.into_iter().map(convert::schedule).collect();
    Ok(Json(ScheduleList { schedules }))
}

#[utoipa::path(delete, path = "/v1/queues/{queue}/schedules/{id}", tag = "schedules",
    params(("queue" = String, Path, description = "Queue name"),
        ("id" = String, Path, description = "Schedule id")),
    responses((status = 204, description = "Deleted; messages it already enqueued stay"),
        (status = 404, body = ErrorBody, description = "queue_not_found or schedule_not_found")))]
pub async fn delete_schedule(
    State(state): State<AppState>,
    SchedulePath(queue, id): SchedulePath,
) -> ApiResult<StatusCode> {
    state.broker.delete_schedule(&queue, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/queues/{queue}/schedules/{id}/pause", tag = "schedules",
    params(("queue" = String, Path, description = "Queue name"),
        ("id" = String, Path, description = "Schedule id")),
    responses((status = 200, body = Schedule, description = "Paused (already paused: unchanged)"),
        (status = 404, body = ErrorBody, description = "queue_not_found or schedule_not_found")))]
pub async fn pause_schedule(
    State(state): State<AppState>,
    SchedulePath(queue, id): SchedulePath,
) -> ApiResult<Json<Schedule>> {
    let record = state.broker.set_schedule_paused(&queue, &id, true).await?;
    Ok(Json(convert::schedule(record)))
}

#[utoipa::path(post, path = "/v1/queues/{queue}/schedules/{id}/resume", tag = "schedules",
    params(("queue" = String, Path, description = "Queue name"),
        ("id" = String, Path, description = "Schedule id")),
    responses((status = 200, body = Schedule, description = "Resumed; fire times that passed while paused do not fire"),
        (status = 404, body = ErrorBody, description = "queue_not_found or schedule_not_found")))]
pub async fn resume_schedule(
    State(state): State<AppState>,
    SchedulePath(queue, id): SchedulePath,
) -> ApiResult<Json<Schedule>> {
    let record = state.broker.set_schedule_paused(&queue, &id, false).await?;
    Ok(Json(convert::schedule(record)))
}

#[utoipa::path(post, path = "/v1/queues/{queue}/schedules/{id}/trigger", tag = "schedules",
    params(("queue" = String, Path, description = "Queue name"),
        ("id" = String, Path, description = "Schedule id")),
    responses((status = 201, body = Enqueued, description = "Enqueued one message now, id `<schedule id>:manual:<now>`; not a fire"),
        (status = 200, body = Enqueued, description = "A live message with that id already existed; nothing changed"),
        (status = 404, body = ErrorBody, description = "queue_not_found or schedule_not_found")))]
pub async fn trigger_schedule(
    State(state): State<AppState>,
    SchedulePath(queue, id): SchedulePath,
) -> ApiResult<(StatusCode, Json<Enqueued>)> {
    let outcome = state.broker.trigger_schedule(&queue, &id).await?;
    let status = if outcome.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(convert::triggered(outcome))))
}

#[utoipa::path(post, path = "/v1/schedules/preview", tag = "schedules",
    request_body = PreviewBody,
    responses((status = 200, body = Preview, description = "The next fire times at or after start_at; stores nothing"),
        (status = 400, body = ErrorBody, description = "invalid_argument, naming the field")))]
pub async fn preview(StrictJson(body): StrictJson<PreviewBody>) -> ApiResult<Json<Preview>> {
    let count = convert::preview_count(&body)?;
    let start_at = body
        .start_at
        .unwrap_or_else(|| delayd_core::Clock::now_ms(&delayd_core::SystemClock));
    let recurrence = convert::recurrence(body.cron, body.every_ms, body.tz)?;
    let fires = delayd_core::recurring::preview(&recurrence, start_at, count)?;
    Ok(Json(Preview { fires }))
}
