//! The two read-only endpoints the dashboard (`/ui`) needs beyond api.md:
//! the due-time histogram of a queue's scheduled messages and a listing of
//! one state. They are ordinary `/v1` routes (same auth, metrics, errors
//! and message objects as the rest of the API); only their JSON types live
//! here rather than in `wire`, because no other endpoint uses them.

use axum::extract::State;
use axum::Json;
use delayd_core::{Clock, DueHistogram, MessageState, SystemClock};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{QueuePath, StrictQuery};
use crate::state::AppState;
use delayd_api::{Histogram, MessageList};

/// Default histogram span: the next hour.
pub const DEFAULT_HISTOGRAM_SPAN_MS: u64 = 60 * 60 * 1000;
/// Default number of histogram buckets (one a minute over the next hour).
pub const DEFAULT_HISTOGRAM_BUCKETS: u32 = 60;
/// Most histogram buckets (the `Broker::due_histogram` limit).
pub const MAX_HISTOGRAM_BUCKETS: u32 = 10_000;
/// Default page size of the message list.
pub const DEFAULT_LIST_LIMIT: u32 = 50;

/// Query of `GET /v1/queues/{queue}/histogram`. Unknown parameters are
/// refused, so a typo such as `bucket=` is never silently the default.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HistogramQuery {
    /// Start, epoch ms; default now. Messages due earlier count in bucket 0.
    pub from: Option<u64>,
    /// End (exclusive), epoch ms, after `from`; default `from` + 1 hour.
    pub to: Option<u64>,
    /// 1..=10000, default 60.
    #[param(minimum = 1, maximum = 10000)]
    pub buckets: Option<u32>,
}

/// Query of `GET /v1/queues/{queue}/messages` (strict, as above).
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListByStateQuery {
    pub state: StateParam,
    /// 1..=1000, default 50.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// The id of the last message of the previous page.
    pub after: Option<String>,
}

/// A live message state: `scheduled`, `ready`, `leased` or `dead`.
/// Retained messages are never listed: `acked` and `cancelled` are 400
/// `invalid_argument` naming `state`.
// Read through `TryFrom<String>` so that those two get a message saying
// why, rather than serde's "unknown variant".
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum StateParam {
    Scheduled,
    Ready,
    Leased,
    Dead,
}

impl TryFrom<String> for StateParam {
    type Error = String;

    fn try_from(state: String) -> Result<Self, String> {
        match state.as_str() {
            "scheduled" => Ok(Self::Scheduled),
            "ready" => Ok(Self::Ready),
            "leased" => Ok(Self::Leased),
            "dead" => Ok(Self::Dead),
            "acked" | "cancelled" => Err(format!(
                "state {state} is not listed: retained messages are never listed \
                 (GET /v1/queues/{{queue}}/messages/{{id}} shows one)"
            )),
            _ => Err(format!(
                "state must be one of scheduled, ready, leased, dead; got {state:?}"
            )),
        }
    }
}

impl From<StateParam> for MessageState {
    fn from(state: StateParam) -> Self {
        match state {
            StateParam::Scheduled => Self::Scheduled,
            StateParam::Ready => Self::Ready,
            StateParam::Leased => Self::Leased,
            StateParam::Dead => Self::Dead,
        }
    }
}

#[utoipa::path(get, path = "/v1/queues/{queue}/histogram", tag = "dashboard",
    params(("queue" = String, Path, description = "Queue name"), HistogramQuery),
    responses((status = 200, body = Histogram,
        description = "Scheduled messages counted by due time"),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn histogram(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
    StrictQuery(query): StrictQuery<HistogramQuery>,
) -> ApiResult<Json<Histogram>> {
    let from = query.from.unwrap_or_else(|| SystemClock.now_ms());
    let to = query
        .to
        .unwrap_or_else(|| from.saturating_add(DEFAULT_HISTOGRAM_SPAN_MS));
    if to <= from {
        return Err(ApiError::invalid_argument("`to` must be after `from`"));
    }
    let buckets = query.buckets.unwrap_or(DEFAULT_HISTOGRAM_BUCKETS);
    if !(1..=MAX_HISTOGRAM_BUCKETS).contains(&buckets) {
        return Err(ApiError::invalid_argument(format!(
            "`buckets` must be 1..={MAX_HISTOGRAM_BUCKETS}, got {buckets}"
        )));
    }
    let histogram = state
        .broker
        .due_histogram(&queue, from, to, buckets)
        .await?;
    Ok(Json(histogram_json(from, to, buckets, histogram)))
}

/// The histogram's JSON: the broker's counts with the window they cover.
fn histogram_json(from: u64, to: u64, buckets: u32, histogram: DueHistogram) -> Histogram {
    Histogram {
        from,
        to,
        // The same width `Broker::due_histogram` uses.
        bucket_ms: (to - from).div_ceil(u64::from(buckets)).max(1),
        counts: histogram.counts,
        truncated: histogram.truncated,
    }
}

#[utoipa::path(get, path = "/v1/queues/{queue}/messages", tag = "dashboard",
    params(("queue" = String, Path, description = "Queue name"), ListByStateQuery),
    responses((status = 200, body = MessageList,
        description = "Messages of one state: scheduled by due time, ready in delivery order, \
            leased by lease expiry, dead oldest death first"),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn list_messages(
    State(state): State<AppState>,
    QueuePath(queue): QueuePath,
    StrictQuery(query): StrictQuery<ListByStateQuery>,
) -> ApiResult<Json<MessageList>> {
    let state_param = query.state.into();
    super::dead::page(
        &state,
        &queue,
        state_param,
        query.limit,
        DEFAULT_LIST_LIMIT,
        query.after,
    )
    .await
}
