//! Dead letters: paged listing (oldest death first) and redrive.

use axum::extract::State;
use axum::Json;
use delayd_core::{ListQuery, MessageId, MessageState, Redrive};

use delayd_api::{MessageList, RedriveBody, Redriven};

use crate::convert;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{QueuePath, StrictJson, StrictQuery};
use crate::state::AppState;
use crate::wire::DeadQuery;

const DEFAULT_LIMIT: u32 = 100;
const MAX_LIMIT: u32 = 1000;

#[utoipa::path(get, path = "/v1/queues/{queue}/dead", tag = "dead letters",
    params(("queue" = String, Path, description = "Queue name"), DeadQuery),
    responses((status = 200, body = MessageList, description = "Oldest death first"),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn list_dead(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
    StrictQuery(query): StrictQuery<DeadQuery>,
) -> ApiResult<Json<MessageList>> {
    page(
        &state,
        &queue,
        MessageState::Dead,
        query.limit,
        DEFAULT_LIMIT,
        query.after,
    )
    .await
}

/// One page of a queue's messages in `message_state`: `limit` (1..=1000,
/// `default` when absent) messages after the message `after`. The dead
/// list and the dashboard's listing by state.
pub(super) async fn page(
    state: &AppState,
    queue: &delayd_core::QueueName,
    message_state: MessageState,
    limit: Option<u32>,
    default: u32,
    after: Option<String>,
) -> ApiResult<Json<MessageList>> {
    let limit = limit.unwrap_or(default);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid_argument(format!(
            "limit must be 1..={MAX_LIMIT}, got {limit}"
        )));
    }
    let after = after.map(MessageId::new).transpose()?;
    let list = ListQuery {
        state: message_state,
        after,
        limit,
    };
    let messages = state.broker.list(queue, list).await?;
    Ok(Json(MessageList {
        messages: messages.into_iter().map(convert::message).collect(),
    }))
}

#[utoipa::path(post, path = "/v1/queues/{queue}/dead/redrive", tag = "dead letters",
    params(("queue" = String, Path, description = "Queue name")),
    request_body(content = RedriveBody, description = "May be empty: redrive all"),
    responses((status = 200, body = Redriven),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn redrive(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
    StrictJson(body): StrictJson<RedriveBody>,
) -> ApiResult<Json<Redriven>> {
    let which = match body.ids {
        None => Redrive::All,
        Some(ids) => Redrive::Ids(
            ids.into_iter()
                .map(MessageId::new)
                .collect::<Result<_, _>>()?,
        ),
    };
    let redriven = state.broker.redrive(&queue, which).await?;
    Ok(Json(Redriven { redriven }))
}
