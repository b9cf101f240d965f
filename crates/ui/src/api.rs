//! The read-only endpoints the dashboard needs beyond api.md: the due-time
//! histogram of a queue's scheduled messages and a listing of one state.
//! Merged by the server into its `/v1` router behind its auth layer, so
//! nothing here checks tokens.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use delayd_core::{Broker, Clock, ListQuery, MessageId, MessageState, QueueName, SystemClock};

use crate::error::ApiError;
use crate::wire::{HistogramDto, MessageList};

/// Default histogram span: the next hour.
pub const DEFAULT_HISTOGRAM_SPAN_MS: u64 = 60 * 60 * 1000;
/// Default number of histogram buckets (one a minute over the next hour).
pub const DEFAULT_HISTOGRAM_BUCKETS: u32 = 60;
/// Most histogram buckets (the `Broker::due_histogram` limit).
pub const MAX_HISTOGRAM_BUCKETS: u32 = 10_000;
/// Default page size of the message list.
pub const DEFAULT_LIST_LIMIT: u32 = 50;
/// Largest page of the message list (as api.md's dead-letter list).
pub const MAX_LIST_LIMIT: u32 = 1000;

type Params = Result<Query<HashMap<String, String>>, QueryRejection>;

/// `GET /v1/queues/{queue}/histogram` and `GET /v1/queues/{queue}/messages`.
pub fn api_router() -> Router<Arc<dyn Broker>> {
    Router::new()
        .route("/v1/queues/{queue}/histogram", get(histogram))
        .route("/v1/queues/{queue}/messages", get(list_messages))
}

async fn histogram(
    State(broker): State<Arc<dyn Broker>>,
    queue: Result<Path<String>, PathRejection>,
    params: Params,
) -> Result<Json<HistogramDto>, ApiError> {
    let queue = queue_name(queue)?;
    let params = Fields::new(params, &["from", "to", "buckets"])?;
    let from = match params.u64("from")? {
        Some(from) => from,
        None => SystemClock.now_ms(),
    };
    let to = match params.u64("to")? {
        Some(to) => to,
        None => from.saturating_add(DEFAULT_HISTOGRAM_SPAN_MS),
    };
    let buckets = params
        .u64("buckets")?
        .unwrap_or(DEFAULT_HISTOGRAM_BUCKETS.into());
    if to <= from {
        return Err(ApiError::invalid_argument("`to` must be after `from`"));
    }
    let buckets = u32::try_from(buckets)
        .ok()
        .filter(|b| (1..=MAX_HISTOGRAM_BUCKETS).contains(b))
        .ok_or_else(|| {
            ApiError::invalid_argument(format!("`buckets` must be 1..={MAX_HISTOGRAM_BUCKETS}"))
        })?;
    let histogram = broker.due_histogram(&queue, from, to, buckets).await?;
    // The same width `Broker::due_histogram` uses.
    let bucket_ms = (to - from).div_ceil(u64::from(buckets)).max(1);
    Ok(Json(HistogramDto::new(from, to, bucket_ms, histogram)))
}

async fn list_messages(
    State(broker): State<Arc<dyn Broker>>,
    queue: Result<Path<String>, PathRejection>,
    params: Params,
) -> Result<Json<MessageList>, ApiError> {
    let queue = queue_name(queue)?;
    let params = Fields::new(params, &["state", "limit", "after"])?;
    let state = match params.str("state") {
        Some("scheduled") => MessageState::Scheduled,
        Some("ready") => MessageState::Ready,
        Some("leased") => MessageState::Leased,
        Some("dead") => MessageState::Dead,
        _ => {
            return Err(ApiError::invalid_argument(
                "`state` must be one of scheduled, ready, leased, dead",
            ))
        }
    };
    let limit = params.u64("limit")?.unwrap_or(DEFAULT_LIST_LIMIT.into());
    let limit = u32::try_from(limit)
        .ok()
        .filter(|l| (1..=MAX_LIST_LIMIT).contains(l))
        .ok_or_else(|| {
            ApiError::invalid_argument(format!("`limit` must be 1..={MAX_LIST_LIMIT}"))
        })?;
    let after = params
        .str("after")
        .map(MessageId::new)
        .transpose()
        .map_err(|err| ApiError::invalid_argument(format!("`after`: {err}")))?;
    let query = ListQuery {
        state,
        after,
        limit,
    };
    let messages = broker.list(&queue, query).await?;
    Ok(Json(MessageList {
        messages: messages.into_iter().map(Into::into).collect(),
    }))
}

fn queue_name(path: Result<Path<String>, PathRejection>) -> Result<QueueName, ApiError> {
    let Path(name) = path.map_err(|err| ApiError::invalid_argument(err.body_text()))?;
    Ok(QueueName::new(name)?)
}

/// Query parameters, strict as api.md's bodies: an unknown name is a 400,
/// so a typo such as `bucket=` is never silently the default.
struct Fields(HashMap<String, String>);

impl Fields {
    fn new(params: Params, known: &[&str]) -> Result<Self, ApiError> {
        let Query(params) = params.map_err(|err| ApiError::invalid_argument(err.body_text()))?;
        if let Some(unknown) = params.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(ApiError::invalid_argument(format!(
                "unknown query parameter `{unknown}` (known: {})",
                known.join(", ")
            )));
        }
        Ok(Self(params))
    }

    fn str(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// A non-negative integer, or `None` when absent.
    fn u64(&self, name: &str) -> Result<Option<u64>, ApiError> {
        self.str(name)
            .map(|raw| {
                raw.parse::<u64>().map_err(|_| {
                    ApiError::invalid_argument(format!(
                        "`{name}` must be a non-negative integer, got {raw:?}"
                    ))
                })
            })
            .transpose()
    }
}
