//! Consuming: lease (long-poll is the broker's job; we only pass `wait_ms`),
//! ack, nack, extend.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use delayd_core::metric::{self, Stage};
use delayd_core::{
    BrokerError, Clock as _, LeaseId, LeaseRequest, MessageId, Nack, SystemClock, MAX_BATCH,
};

use delayd_api::{
    AckBody, AckResult, AckResults, AcksBody, ExtendBody, Extended, LeaseBody, LeasedList, NackBody,
};

use crate::convert::{self, check_delay, check_lease_ms};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{MessagePath, QueuePath, StrictJson};
use crate::state::AppState;
use crate::ServerOptions;

/// api.md: `max` is 1..=1000.
const MAX_LEASE_BATCH: u32 = 1000;

#[utoipa::path(post, path = "/v1/queues/{queue}/leases", tag = "consuming",
    params(("queue" = String, Path, description = "Queue name")),
    request_body(content = LeaseBody, description = "May be empty: all defaults"),
    responses((status = 200, body = LeasedList,
        description = "Up to `max` messages; an empty list when none came within `wait_ms`"),
        (status = 400, body = ErrorBody)))]
pub async fn lease(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
    StrictJson(body): StrictJson<LeaseBody>,
) -> ApiResult<Json<LeasedList>> {
    let request = lease_request(body, &state.options)?;
    let deliveries = state.broker.lease(&[queue], request).await?;
    let now = SystemClock.now_ms();
    let answered = metric::Lateness::of(Stage::Answered);
    for delivery in &deliveries {
        answered.record(now, delivery.deliver_at);
    }
    Ok(Json(LeasedList {
        messages: deliveries.into_iter().map(convert::leased).collect(),
    }))
}

fn lease_request(body: LeaseBody, options: &ServerOptions) -> Result<LeaseRequest, ApiError> {
    let max_wait_ms = options.max_wait_ms;
    let max = body.max;
    if !(1..=MAX_LEASE_BATCH).contains(&max) {
        return Err(ApiError::invalid_argument(format!(
            "max must be 1..={MAX_LEASE_BATCH}, got {max}"
        )));
    }
    let wait_ms = body.wait_ms;
    if wait_ms > max_wait_ms {
        return Err(ApiError::invalid_argument(format!(
            "wait_ms must be 0..={max_wait_ms}, got {wait_ms}"
        )));
    }
    check_lease_ms(body.lease_ms, options.max_delay_ms)?;
    Ok(LeaseRequest {
        max,
        wait_ms,
        lease_ms: body.lease_ms,
    })
}

#[utoipa::path(post, path = "/v1/queues/{queue}/messages/{id}/ack", tag = "consuming",
    params(("queue" = String, Path, description = "Queue name"),
        ("id" = String, Path, description = "Message id")),
    request_body = AckBody,
    responses((status = 204, description = "Done; the message is gone"),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn ack(
    State(state): State<AppState>,
    MessagePath(queue, id): MessagePath,
    StrictJson(body): StrictJson<AckBody>,
) -> ApiResult<StatusCode> {
    state
        .broker
        .ack(&queue, &id, &LeaseId(body.lease_id))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/queues/{queue}/acks", tag = "consuming",
    params(("queue" = String, Path, description = "Queue name")),
    request_body = AcksBody,
    responses((status = 200, body = AckResults,
        description = "One result per item, in input order; a failed item does not fail the others"),
        (status = 400, body = ErrorBody,
        description = "More than 1000 items, or an item without `id` or `lease_id`: nothing acked")))]
pub async fn ack_many(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
    StrictJson(body): StrictJson<AcksBody>,
) -> ApiResult<Json<AckResults>> {
    if body.acks.len() > MAX_BATCH {
        return Err(ApiError::invalid_argument(format!(
            "at most {MAX_BATCH} acks per request, got {}",
            body.acks.len()
        )));
    }
    // An id that is not a valid message id names no message: that item
    // fails on its own, like the single ack's 404 would.
    let parsed: Vec<Option<MessageId>> = body
        .acks
        .iter()
        .map(|item| MessageId::new(item.id.clone()).ok())
        .collect();
    let valid: Vec<(MessageId, LeaseId)> = body
        .acks
        .iter()
        .zip(&parsed)
        .filter_map(|(item, id)| Some((id.clone()?, LeaseId(item.lease_id.clone()))))
        .collect();
    let mut outcomes = if valid.is_empty() {
        Vec::new()
    } else {
        state.broker.ack_many(&queue, valid).await?
    }
    .into_iter();
    let results = body
        .acks
        .into_iter()
        .zip(parsed)
        .map(|(item, id)| {
            let outcome = match id {
                None => Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    "message_not_found",
                    format!("no message {:?} in queue {queue}", item.id),
                )),
                Some(_) => match outcomes.next() {
                    Some(outcome) => outcome.map_err(ApiError::from),
                    None => Err(ApiError::from(BrokerError::unavailable(
                        "the broker answered fewer acks than were sent",
                    ))),
                },
            };
            match outcome {
                Ok(()) => AckResult {
                    id: item.id,
                    acked: true,
                    error: None,
                },
                Err(err) => AckResult {
                    id: item.id,
                    acked: false,
                    error: Some(err.body().error),
                },
            }
        })
        .collect();
    Ok(Json(AckResults { results }))
}

#[utoipa::path(post, path = "/v1/queues/{queue}/messages/{id}/nack", tag = "consuming",
    params(("queue" = String, Path, description = "Queue name"),
        ("id" = String, Path, description = "Message id")),
    request_body = NackBody,
    responses((status = 204, description = "Scheduled again, or dead when out of attempts; with `defer: true` (queues with `flow` only) deferred: the attempt is given back and the key cools down"),
        (status = 400, body = ErrorBody, description = "`defer: true` on a queue without `flow`; an `error` over 1024 bytes"),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn nack(
    State(state): State<AppState>,
    MessagePath(queue, id): MessagePath,
    StrictJson(body): StrictJson<NackBody>,
) -> ApiResult<StatusCode> {
    if let Some(delay) = body.delay_ms {
        check_delay(delay, state.options.max_delay_ms)?;
    }
    // On a queue without `flow`, `defer: true` is refused by the broker
    // (400): only it knows the queue's config at the moment of the nack.
    let nack = Nack {
        delay_ms: body.delay_ms,
        defer: body.defer,
        error: body.error,
        ..Nack::default()
    };
    state
        .broker
        .nack(&queue, &id, &LeaseId(body.lease_id), nack)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/queues/{queue}/messages/{id}/extend", tag = "consuming",
    params(("queue" = String, Path, description = "Queue name"),
        ("id" = String, Path, description = "Message id")),
    request_body = ExtendBody,
    responses((status = 200, body = Extended),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn extend(
    State(state): State<AppState>,
    MessagePath(queue, id): MessagePath,
    StrictJson(body): StrictJson<ExtendBody>,
) -> ApiResult<Json<Extended>> {
    check_lease_ms(body.lease_ms, state.options.max_delay_ms)?;
    let lease_until = state
        .broker
        .extend(&queue, &id, &LeaseId(body.lease_id), body.lease_ms)
        .await?;
    Ok(Json(Extended { lease_until }))
}
