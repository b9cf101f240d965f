//! Operations: liveness, readiness, Prometheus metrics, the OpenAPI document.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use utoipa::OpenApi as _;

use delayd_api::Status;

use crate::error::{ApiResult, ErrorBody};
use crate::state::AppState;

#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, body = Status, description = "The process is up")))]
pub async fn healthz() -> Json<Status> {
    Json(Status {
        status: "ok".into(),
    })
}

#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses((status = 200, body = Status, description = "The store takes writes"),
        (status = 503, body = ErrorBody)))]
pub async fn readyz(State(state): State<AppState>) -> ApiResult<Json<Status>> {
    state.broker.ready().await?;
    Ok(Json(Status {
        status: "ready".into(),
    }))
}

#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, content_type = "text/plain", body = String,
        description = "Prometheus text format")))]
pub async fn metrics(State(state): State<AppState>) -> Response {
    crate::metrics::set_info_gauges();
    crate::metrics::refresh_queue_gauges(&state).await;
    let body = state.metrics.render();
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        body,
    )
        .into_response()
}

#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "This document")))]
pub async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(super::ApiDoc::openapi())
}
