//! The route table and the OpenAPI document generated from the handlers.

mod consume;
mod dashboard;
mod dead;
mod messages;
mod ops;
mod queues;

use axum::routing::{get, post, put};
use axum::Router;
use utoipa::OpenApi;

use crate::error::{ErrorBody, ErrorDetail};
use crate::state::AppState;
use crate::wire;

/// The template of the lease route, which the in-flight tracker leaves out
/// (a waiting lease is not work to finish before shutting the broker down).
pub const LEASE_ROUTE: &str = "/v1/queues/{queue}/leases";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/queues", get(queues::list_queues))
        .route(
            "/v1/queues/{queue}",
            put(queues::put_queue)
                .get(queues::get_queue)
                .delete(queues::delete_queue),
        )
        .route("/v1/queues/{queue}/pause", post(queues::pause))
        .route("/v1/queues/{queue}/resume", post(queues::resume))
        .route(
            "/v1/queues/{queue}/messages",
            post(messages::enqueue).get(dashboard::list_messages),
        )
        .route("/v1/queues/{queue}/histogram", get(dashboard::histogram))
        .route("/v1/queues/{queue}/batch", post(messages::batch))
        .route(
            "/v1/queues/{queue}/messages/{id}",
            get(messages::get_message)
                .delete(messages::cancel)
                .patch(messages::reschedule),
        )
        .route(LEASE_ROUTE, post(consume::lease))
        .route("/v1/queues/{queue}/messages/{id}/ack", post(consume::ack))
        .route("/v1/queues/{queue}/acks", post(consume::ack_many))
        .route("/v1/queues/{queue}/messages/{id}/nack", post(consume::nack))
        .route(
            "/v1/queues/{queue}/messages/{id}/extend",
            post(consume::extend),
        )
        .route("/v1/queues/{queue}/dead", get(dead::list_dead))
        .route("/v1/queues/{queue}/dead/redrive", post(dead::redrive))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/openapi.json", get(ops::openapi))
}

#[derive(OpenApi)]
#[openapi(
    info(title = "delayd", description = "Durable delayed-message service, HTTP API v1"),
    paths(
        queues::put_queue, queues::list_queues, queues::get_queue, queues::delete_queue,
        queues::pause, queues::resume,
        messages::enqueue, messages::batch, messages::get_message, messages::cancel,
        messages::reschedule,
        consume::lease, consume::ack, consume::ack_many, consume::nack, consume::extend,
        dead::list_dead, dead::redrive,
        ops::healthz, ops::readyz, ops::metrics, ops::openapi,
    ),
    components(schemas(
        ErrorBody, ErrorDetail,
        wire::QueuePutBody, wire::RetryBody, wire::PushBody, wire::QueueDto,
        wire::QueueConfigDto, wire::RetryDto, wire::PushDto, wire::StatsDto, wire::QueueList,
        wire::EnqueueBody, wire::BatchBody, wire::EnqueueResult, wire::BatchItemResult,
        wire::BatchResults, wire::PatchBody, wire::MessageDto, wire::MessageList,
        wire::LeaseBody, wire::LeasedMessage, wire::LeaseResponse, wire::AckBody, wire::AcksBody, wire::AckItem,
        wire::AckResult, wire::AckResults,
        wire::NackBody, wire::ExtendBody, wire::ExtendResponse, wire::RedriveBody,
        wire::RedriveResponse, wire::StatusBody,
    )),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
)]
pub struct ApiDoc;

/// Declares the optional bearer-token scheme (`--token`).
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}
