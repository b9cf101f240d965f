//! The route table and the OpenAPI document generated from the handlers.
//!
//! The router is built from [`api_routes`] only, and every entry there must
//! appear in [`ApiDoc`] with the same path and method (and nothing else may
//! appear in it): `openapi_tests` checks both directions against the served
//! document and the live router, so a route cannot go undocumented.

mod consume;
mod dashboard;
mod dead;
mod keys;
mod messages;
mod ops;
mod queues;
mod schedules;
mod whoami;

#[cfg(test)]
mod body_fuzz_tests;
#[cfg(test)]
mod openapi_tests;

use axum::handler::Handler;
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::Router;
use utoipa::OpenApi;

use delayd_api as wire;

use crate::error::{ErrorBody, ErrorDetail};
use crate::state::AppState;

/// The template of the lease route, which the in-flight tracker leaves out
/// (a waiting lease is not work to finish before shutting the broker down).
pub const LEASE_ROUTE: &str = "/v1/queues/{queue}/leases";

/// The HTTP methods the API uses. Our own enum rather than `http::Method`
/// so that naming a method can never fail (`MethodFilter` has no filter for
/// extension methods) and the OpenAPI name is at hand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verb {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

impl Verb {
    #[cfg(test)]
    pub const ALL: [Verb; 5] = [Verb::Get, Verb::Post, Verb::Put, Verb::Patch, Verb::Delete];

    fn filter(self) -> MethodFilter {
        match self {
            Verb::Get => MethodFilter::GET,
            Verb::Post => MethodFilter::POST,
            Verb::Put => MethodFilter::PUT,
            Verb::Patch => MethodFilter::PATCH,
            Verb::Delete => MethodFilter::DELETE,
        }
    }

    /// The method as an HTTP request carries it.
    pub fn method(self) -> axum::http::Method {
        use axum::http::Method;
        match self {
            Verb::Get => Method::GET,
            Verb::Post => Method::POST,
            Verb::Put => Method::PUT,
            Verb::Patch => Method::PATCH,
            Verb::Delete => Method::DELETE,
        }
    }

    /// The method as an OpenAPI path item names it (lowercase).
    #[cfg(test)]
    pub fn openapi_name(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::Post => "post",
            Verb::Put => "put",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }
}

/// One route of the API: what the router serves and the document describes.
pub struct ApiRoute {
    #[cfg_attr(not(test), expect(dead_code, reason = "read by openapi_tests"))]
    pub verb: Verb,
    pub path: &'static str,
    handler: MethodRouter<AppState>,
}

impl ApiRoute {
    fn new<H, T>(verb: Verb, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        Self {
            verb,
            path,
            handler: on(verb.filter(), handler),
        }
    }
}

/// Every API route. Add a route here (and its handler to [`ApiDoc`]'s
/// `paths`), never with `Router::route` elsewhere.
pub fn api_routes() -> Vec<ApiRoute> {
    use Verb::{Delete, Get, Patch, Post, Put};
    const QUEUE: &str = "/v1/queues/{queue}";
    const MESSAGES: &str = "/v1/queues/{queue}/messages";
    const MESSAGE: &str = "/v1/queues/{queue}/messages/{id}";
    const SCHEDULE: &str = "/v1/queues/{queue}/schedules/{id}";
    vec![
        ApiRoute::new(Get, "/v1/whoami", whoami::whoami),
        ApiRoute::new(Get, "/v1/queues", queues::list_queues),
        ApiRoute::new(Put, QUEUE, queues::put_queue),
        ApiRoute::new(Get, QUEUE, queues::get_queue),
        ApiRoute::new(Delete, QUEUE, queues::delete_queue),
        ApiRoute::new(Post, "/v1/queues/{queue}/pause", queues::pause),
        ApiRoute::new(Post, "/v1/queues/{queue}/resume", queues::resume),
        ApiRoute::new(Post, MESSAGES, messages::enqueue),
        ApiRoute::new(Post, "/v1/queues/{queue}/batch", messages::batch),
        ApiRoute::new(Get, MESSAGE, messages::get_message),
        ApiRoute::new(Get, crate::access::HISTORY_ROUTE, messages::events),
        ApiRoute::new(Delete, MESSAGE, messages::cancel),
        ApiRoute::new(Patch, MESSAGE, messages::reschedule),
        ApiRoute::new(Post, LEASE_ROUTE, consume::lease),
        ApiRoute::new(Post, "/v1/queues/{queue}/messages/{id}/ack", consume::ack),
        ApiRoute::new(Post, "/v1/queues/{queue}/acks", consume::ack_many),
        ApiRoute::new(Post, "/v1/queues/{queue}/messages/{id}/nack", consume::nack),
        ApiRoute::new(
            Post,
            "/v1/queues/{queue}/messages/{id}/extend",
            consume::extend,
        ),
        ApiRoute::new(Get, "/v1/queues/{queue}/keys/{key}", keys::key_info),
        ApiRoute::new(Get, "/v1/queues/{queue}/dead", dead::list_dead),
        ApiRoute::new(Post, "/v1/queues/{queue}/dead/redrive", dead::redrive),
        ApiRoute::new(Get, MESSAGES, dashboard::list_messages),
        ApiRoute::new(Get, "/v1/queues/{queue}/histogram", dashboard::histogram),
        ApiRoute::new(Put, SCHEDULE, schedules::put_schedule),
        ApiRoute::new(Get, SCHEDULE, schedules::get_schedule),
        ApiRoute::new(Delete, SCHEDULE, schedules::delete_schedule),
        ApiRoute::new(
            Get,
            "/v1/queues/{queue}/schedules",
            schedules::list_schedules,
        ),
        ApiRoute::new(
            Post,
            "/v1/queues/{queue}/schedules/{id}/pause",
            schedules::pause_schedule,
        ),
        ApiRoute::new(
            Post,
            "/v1/queues/{queue}/schedules/{id}/resume",
            schedules::resume_schedule,
        ),
        ApiRoute::new(
            Post,
            "/v1/queues/{queue}/schedules/{id}/trigger",
            schedules::trigger_schedule,
        ),
        ApiRoute::new(Post, "/v1/schedules/preview", schedules::preview),
        ApiRoute::new(Get, "/healthz", ops::healthz),
        ApiRoute::new(Get, "/readyz", ops::readyz),
        ApiRoute::new(Get, "/metrics", ops::metrics),
        ApiRoute::new(Get, "/openapi.json", ops::openapi),
    ]
}

/// The router of [`api_routes`]. Routes sharing a path are merged by axum
/// into one method router (another method on it answers 405).
pub fn router() -> Router<AppState> {
    api_routes()
        .into_iter()
        .fold(Router::new(), |router, route| {
            router.route(route.path, route.handler)
        })
}

#[derive(OpenApi)]
#[openapi(
    info(title = "delayd", description = "Durable delayed-message service, HTTP API v1"),
    paths(
        queues::put_queue, queues::list_queues, queues::get_queue, queues::delete_queue,
        queues::pause, queues::resume,
        messages::enqueue, messages::batch, messages::get_message, messages::events,
        messages::cancel, messages::reschedule,
        consume::lease, consume::ack, consume::ack_many, consume::nack, consume::extend,
        keys::key_info,
        dead::list_dead, dead::redrive,
        dashboard::histogram, dashboard::list_messages,
        schedules::put_schedule, schedules::get_schedule, schedules::list_schedules,
        schedules::delete_schedule, schedules::pause_schedule, schedules::resume_schedule,
        schedules::trigger_schedule, schedules::preview,
        ops::healthz, ops::readyz, ops::metrics, ops::openapi,
        whoami::whoami,
    ),
    components(schemas(
        ErrorBody, ErrorDetail,
        wire::QueuePutBody, wire::RetryBody, wire::PushBody, wire::Queue,
        wire::QueueConfig, wire::RetryPolicy, wire::PushView, wire::QueueStats, wire::QueueList,
        wire::FlowBody, wire::RateBody, wire::FlowView, wire::RateView, wire::KeyInfo,
        wire::EnqueueBody, wire::OnConflict, wire::Payload, wire::BatchBody, wire::Enqueued, wire::BatchItemResult,
        wire::BatchResults, wire::PatchBody, wire::Message, wire::MessageList,
        wire::History, wire::Event,
        wire::LeaseBody, wire::Leased, wire::LeasedList, wire::AckBody, wire::AcksBody,
        wire::AckItem, wire::AckResult, wire::AckResults,
        wire::NackBody, wire::ExtendBody, wire::Extended, wire::RedriveBody,
        wire::Redriven, wire::Status,
        delayd_api::Histogram, dashboard::StateParam,
        wire::SchedulePutBody, wire::ScheduleMessageBody, wire::CatchupMode, wire::OverlapMode,
        wire::Schedule, wire::ScheduleMessage, wire::ScheduleList, wire::PreviewBody,
        wire::Preview, wire::Whoami,
    )),
    modifiers(&BearerAuth, &ContractRules),
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

/// What holds for many routes at once and is stated here rather than in
/// each annotation (api.md's conventions): the grammar of the `queue` and
/// `id` path parameters; the error answers any `/v1` route can give (400
/// for a malformed path parameter or body, 401 without the token, 503
/// while the store fails or the server stops; 413 where there is a body;
/// 507 where messages are added); and the routes that need no token.
struct ContractRules;

/// The grammars are core's (`delayd_core::is_valid_queue_name`).
const QUEUE_PATTERN: &str = delayd_core::QUEUE_NAME_PATTERN;
const ID_PATTERN: &str = delayd_core::MESSAGE_ID_PATTERN;
/// A schedule id has no `:` (its messages' ids are `<schedule id>:<t>`).
const SCHEDULE_ID_PATTERN: &str = delayd_core::recurring::SCHEDULE_ID_PATTERN;

impl utoipa::Modify for ContractRules {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for (path, item) in openapi.paths.paths.iter_mut() {
            let operations = [
                (Verb::Get, &mut item.get),
                (Verb::Put, &mut item.put),
                (Verb::Post, &mut item.post),
                (Verb::Delete, &mut item.delete),
                (Verb::Patch, &mut item.patch),
            ];
            for (verb, operation) in operations {
                let Some(operation) = operation else {
                    continue;
                };
                let post = verb == Verb::Post;
                if !crate::auth::needs_auth(path) {
                    operation.security = Some(Vec::new());
                    continue;
                }
                add_error(
                    operation,
                    "401",
                    "No bearer token, or one that is neither a `--token` nor in `--token-file` (`unauthorized`)",
                );
                if let Some(forbidden) = forbidden_answer(verb, path) {
                    add_error(operation, "403", &forbidden);
                }
                if !path.starts_with("/v1/") {
                    continue;
                }
                for parameter in operation.parameters.iter_mut().flatten() {
                    let pattern = match parameter.name.as_str() {
                        "queue" => QUEUE_PATTERN,
                        "id" if path.contains("/schedules/") => SCHEDULE_ID_PATTERN,
                        "id" => ID_PATTERN,
                        _ => continue,
                    };
                    parameter.schema = Some(
                        utoipa::openapi::ObjectBuilder::new()
                            .schema_type(utoipa::openapi::schema::Type::String)
                            .pattern(Some(pattern))
                            .into(),
                    );
                }
                add_error(
                    operation,
                    "400",
                    "A malformed path parameter, query or body (`invalid_argument`, `invalid_json`)",
                );
                add_error(
                    operation,
                    "503",
                    "The store failed or the server is stopping (`unavailable`)",
                );
                if operation.request_body.is_some() {
                    add_error(operation, "413", "The body exceeds `--max-body`");
                }
                let adds_messages = ["/messages", "/batch", "/trigger"]
                    .iter()
                    .any(|end| path.ends_with(end));
                if post && adds_messages {
                    add_error(
                        operation,
                        "507",
                        "Free disk space below `--disk-reserve` (`insufficient_storage`)",
                    );
                }
            }
        }
    }
}

/// The 403 a scoped token gets on `verb path`, naming the scope it needs
/// (from the one table, `access::ROUTE_NEEDS`).
fn forbidden_answer(verb: Verb, path: &str) -> Option<String> {
    use crate::access::Need;
    let method = verb.method();
    let need = crate::access::route_need(&method, path)?;
    let scope = match need {
        Need::Open | Need::Token => return None,
        Need::Queue(v) => format!("`{}:GLOB` whose glob matches the queue", v.name()),
        Need::AnyQueue(v) => format!("a `{}:GLOB` scope (any glob)", v.name()),
        Need::EveryQueue(v) => format!("`{}:*`", v.name()),
    };
    Some(format!(
        "A scoped token (`--token-file`) without {scope} (`forbidden`)"
    ))
}

/// Adds an error answer with api.md's error body, unless the route's own
/// annotation already describes that status.
fn add_error(operation: &mut utoipa::openapi::path::Operation, status: &str, description: &str) {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    let responses = &mut operation.responses.responses;
    if responses.contains_key(status) {
        return;
    }
    let response = ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        )
        .build();
    responses.insert(status.to_string(), response.into());
}
