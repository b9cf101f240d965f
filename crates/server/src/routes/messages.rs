//! Message endpoints: enqueue (one or a batch), get, history, cancel,
//! reschedule.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use delayd_core::{EnqueueOptions, EnqueueRequest, Reschedule};

use delayd_api::{
    BatchBody, BatchItemResult, BatchResults, EnqueueBody, Enqueued, History, Message, PatchBody,
};

use crate::convert::{self, enqueue_request, schedule, Limits};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{parse_value, MessagePath, QueuePath, StrictJson};
use crate::state::AppState;

#[utoipa::path(post, path = "/v1/queues/{queue}/messages", tag = "messages",
    params(("queue" = String, Path, description = "Queue name")),
    request_body = EnqueueBody,
    responses((status = 201, body = Enqueued, description = "Enqueued: a new message (`created: true`)"),
        (status = 200, body = Enqueued,
            description = "A live message with this id exists. `on_conflict: keep` (the default): nothing changed. \
`replace` or `debounce`: the waiting message took the request (`replaced: true`), or, being leased, keeps it as its \
successor (`replaced: true, after_lease: true`)"),
        (status = 400, body = ErrorBody,
            description = "`invalid_argument`, naming the field: also an unknown `on_conflict`, `debounce_max_ms` \
without `on_conflict: debounce`, or `replace`/`debounce` without an `id`"),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody,
            description = "`invalid_state`: `replace` or `debounce` of a dead message (redrive or cancel it first)"),
        (status = 413, body = ErrorBody)))]
pub async fn enqueue(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
    StrictJson(body): StrictJson<EnqueueBody>,
) -> ApiResult<(StatusCode, Json<Enqueued>)> {
    let request = enqueue_request(body, &state.limits())?;
    let mut results = state
        .broker
        .enqueue(&queue, vec![request], state.enqueue_options())
        .await?;
    let outcome = results
        .pop()
        .ok_or_else(|| ApiError::from_status(StatusCode::INTERNAL_SERVER_ERROR))??;
    let status = if outcome.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(convert::enqueued(outcome))))
}

#[utoipa::path(post, path = "/v1/queues/{queue}/batch", tag = "messages",
    params(("queue" = String, Path, description = "Queue name")),
    request_body = BatchBody,
    responses((status = 200, body = BatchResults,
            description = "Results in input order: each item's answer as a single enqueue's (an error, such as \
a 409 `invalid_state`, in the item's own slot)"),
        (status = 400, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub async fn batch(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
    // Items stay raw JSON here so each is read, and refused, on its own.
    StrictJson(body): StrictJson<BatchBody<serde_json::Value>>,
) -> ApiResult<Json<BatchResults>> {
    let max_batch = state.options.max_batch;
    if body.messages.len() > max_batch {
        return Err(ApiError::invalid_argument(format!(
            "a batch holds at most {max_batch} messages, got {}",
            body.messages.len()
        )));
    }
    let limits = state.limits();
    // Invalid items are answered in place; only the valid ones go to the
    // broker, in one call (one group commit).
    let checked: Vec<Result<EnqueueRequest, ApiError>> = body
        .messages
        .into_iter()
        .enumerate()
        .map(|(index, item)| {
            let body: EnqueueBody = parse_value(item, &format!("messages[{index}]"))?;
            enqueue_request(body, &limits)
        })
        .collect();
    let valid: Vec<EnqueueRequest> = checked
        .iter()
        .filter_map(|item| item.as_ref().ok().cloned())
        .collect();
    let mut outcomes = if valid.is_empty() {
        Vec::new()
    } else {
        state
            .broker
            .enqueue(&queue, valid, state.enqueue_options())
            .await?
    }
    .into_iter();
    let results = checked
        .into_iter()
        .map(|item| {
            let outcome = item.and_then(|_| match outcomes.next() {
                Some(outcome) => outcome.map_err(ApiError::from),
                None => Err(ApiError::from_status(StatusCode::INTERNAL_SERVER_ERROR)),
            });
            match outcome {
                Ok(outcome) => BatchItemResult::Enqueued(convert::enqueued(outcome)),
                Err(err) => BatchItemResult::Failed(err.body()),
            }
        })
        .collect();
    Ok(Json(BatchResults { results }))
}

#[utoipa::path(get, path = "/v1/queues/{queue}/messages/{id}", tag = "messages",
    params(("queue" = String, Path, description = "Queue name"),
        ("id" = String, Path, description = "Message id")),
    responses((status = 200, body = Message), (status = 404, body = ErrorBody)))]
pub async fn get_message(
    State(state): State<AppState>,
    MessagePath(queue, id): MessagePath,
) -> ApiResult<Json<Message>> {
    Ok(Json(convert::message(state.broker.get(&queue, &id).await?)))
}

/// The history of a live or retained message, oldest first (api.md,
/// "Message history"). Found and not found exactly as `GET` of the
/// message: both ask the broker about the same record.
#[utoipa::path(get, path = "/v1/queues/{queue}/messages/{id}/events", tag = "messages",
    params(("queue" = String, Path, description = "Queue name"),
        ("id" = String, Path, description = "Message id")),
    responses((status = 200, body = History,
            description = "The message's last 32 events, oldest first; `dropped` counts the older ones"),
        (status = 404, body = ErrorBody,
            description = "No live or retained message with this id (`message_not_found`)")))]
pub async fn events(
    State(state): State<AppState>,
    MessagePath(queue, id): MessagePath,
) -> ApiResult<Json<History>> {
    Ok(Json(convert::history(
        state.broker.events(&queue, &id).await?,
    )))
}

#[utoipa::path(delete, path = "/v1/queues/{queue}/messages/{id}", tag = "messages",
    params(("queue" = String, Path, description = "Queue name"),
        ("id" = String, Path, description = "Message id")),
    responses((status = 204, description = "Cancelled (any state)"),
        (status = 404, body = ErrorBody)))]
pub async fn cancel(
    State(state): State<AppState>,
    MessagePath(queue, id): MessagePath,
) -> ApiResult<StatusCode> {
    state.broker.cancel(&queue, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(patch, path = "/v1/queues/{queue}/messages/{id}", tag = "messages",
    params(("queue" = String, Path, description = "Queue name"),
        ("id" = String, Path, description = "Message id")),
    request_body = PatchBody,
    responses((status = 200, body = Message), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "Leased or dead: invalid_state")))]
pub async fn reschedule(
    State(state): State<AppState>,
    MessagePath(queue, id): MessagePath,
    StrictJson(body): StrictJson<PatchBody>,
) -> ApiResult<Json<Message>> {
    let change = Reschedule {
        schedule: schedule(body.delay_ms, body.deliver_at, &state.limits())?,
        priority: body.priority,
    };
    let message = state.broker.reschedule(&queue, &id, change).await?;
    Ok(Json(convert::message(message)))
}

impl AppState {
    pub fn enqueue_options(&self) -> EnqueueOptions {
        EnqueueOptions {
            auto_create: self.options.auto_create,
        }
    }

    pub fn limits(&self) -> Limits {
        Limits {
            max_payload: self.options.max_payload,
            max_delay_ms: self.options.max_delay_ms,
            now_ms: delayd_core::Clock::now_ms(&delayd_core::SystemClock),
        }
    }
}
