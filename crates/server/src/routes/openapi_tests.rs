//! The served `/openapi.json` and the router cannot drift apart: every route
//! of the table is documented with its method and every documented
//! operation is in the table (one test), and the live router answers every
//! documented operation and refuses every other method on those paths with
//! 405 (another). The dashboard's files (`/ui`) are not API routes and are
//! in neither.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use delayd_core::testkit::ModelBroker;
use serde_json::Value;
use tower::ServiceExt as _;

use super::{api_routes, Verb};
use crate::ServerOptions;

/// (path template, lowercase method), as OpenAPI names operations.
type Operations = BTreeSet<(String, String)>;

fn app() -> Router {
    crate::app(Arc::new(ModelBroker::new()), ServerOptions::default())
}

async fn call(app: &Router, method: Method, uri: &str) -> (StatusCode, Value) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::empty())
        .expect("a valid request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("a readable body");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn table() -> Operations {
    api_routes()
        .iter()
        .map(|r| (r.path.to_owned(), r.verb.openapi_name().to_owned()))
        .collect()
}

/// Every operation of the served document, whatever its method.
async fn documented(app: &Router) -> Operations {
    let (status, document) = call(app, Method::GET, "/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    let paths = document["paths"].as_object().expect("a paths object");
    let mut operations = Operations::new();
    for (path, item) in paths {
        let item = item.as_object().expect("a path item");
        for method in [
            "get", "put", "post", "delete", "options", "head", "patch", "trace",
        ] {
            if item.contains_key(method) {
                operations.insert((path.clone(), method.to_owned()));
            }
        }
    }
    operations
}

#[tokio::test]
async fn served_document_describes_exactly_the_route_table() {
    let documented = documented(&app()).await;
    let table = table();
    let undocumented: Vec<_> = table.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&table).collect();
    assert!(
        undocumented.is_empty() && unserved.is_empty(),
        "routes without documentation (add the handler to ApiDoc's paths): {undocumented:?}; \
         documented but not routed: {unserved:?}"
    );
}

/// A path template with its parameters filled in.
fn concrete(template: &str) -> String {
    template
        .replace("{queue}", "q")
        .replace("{id}", "m")
        .replace("{key}", "k")
}

#[tokio::test]
async fn router_answers_documented_operations_and_refuses_other_methods() {
    let app = app();
    let documented = documented(&app).await;
    let paths: BTreeSet<&String> = documented.iter().map(|(path, _)| path).collect();
    for path in paths {
        for verb in Verb::ALL {
            let uri = concrete(path);
            let (status, body) = call(&app, verb.method(), &uri).await;
            let is_documented = documented.contains(&(path.clone(), verb.openapi_name().into()));
            let what = format!("{verb:?} {uri}: {status} {body}");
            if is_documented {
                assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{what}");
                assert_ne!(body["error"]["code"], "not_found", "no route: {what}");
            } else {
                assert_eq!(
                    status,
                    StatusCode::METHOD_NOT_ALLOWED,
                    "undocumented: {what}"
                );
            }
        }
    }
}

/// The rules [`super::ContractRules`] adds to the document: routes that
/// need no token say so; every `/v1` operation documents the error answers
/// any of them can give, with api.md's error body; the `queue` and `id`
/// path parameters carry their grammar.
#[tokio::test]
async fn served_document_states_the_shared_rules() {
    let (_, document) = call(&app(), Method::GET, "/openapi.json").await;
    let error_body = "#/components/schemas/ErrorBody";
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("a path item") {
            let what = format!("{method} {path}");
            let responses = &operation["responses"];
            if ["/healthz", "/readyz", "/openapi.json"].contains(&path.as_str()) {
                assert_eq!(operation["security"], serde_json::json!([]), "{what}");
                continue;
            }
            assert!(
                operation.get("security").is_none(),
                "{what} needs the token"
            );
            let mut statuses = vec!["401"];
            if path.starts_with("/v1/") {
                statuses.extend(["400", "503"]);
                if operation.get("requestBody").is_some() {
                    statuses.push("413");
                }
                let adds_messages = ["/messages", "/batch", "/trigger"]
                    .iter()
                    .any(|end| path.ends_with(end));
                if method == "post" && adds_messages {
                    statuses.push("507");
                }
                for parameter in operation["parameters"].as_array().into_iter().flatten() {
                    let expected = match parameter["name"].as_str() {
                        Some("queue") => super::QUEUE_PATTERN,
                        Some("id") if path.contains("/schedules/") => super::SCHEDULE_ID_PATTERN,
                        Some("id") => super::ID_PATTERN,
                        _ => continue,
                    };
                    assert_eq!(parameter["schema"]["pattern"], expected, "{what}");
                }
            }
            for status in statuses {
                let schema = &responses[status]["content"]["application/json"]["schema"];
                assert!(
                    schema["$ref"] == error_body || responses[status]["description"].is_string(),
                    "{what} does not document {status}: {responses}"
                );
                assert!(!responses[status].is_null(), "{what} lacks {status}");
            }
        }
    }
}

/// The properties of an object schema, its own and its `allOf` parts
/// (a body with a flattened field is an `allOf`), with its required ones.
fn properties(schema: &Value) -> (serde_json::Map<String, Value>, Vec<Value>) {
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    let parts = schema["allOf"].as_array().cloned().unwrap_or_default();
    for part in std::iter::once(schema).chain(parts.iter()) {
        if let Some(own) = part["properties"].as_object() {
            properties.extend(own.clone());
        }
        required.extend(part["required"].as_array().cloned().unwrap_or_default());
    }
    (properties, required)
}

/// `on_conflict` and `debounce_max_ms` (api.md, "Retention, replace and
/// debounce"): in the enqueue body (and so each batch item), `replaced`
/// and `after_lease` in the answer (optional: written only when true),
/// and the enqueue's 409 `invalid_state`.
#[tokio::test]
async fn served_document_describes_replace_and_debounce() {
    let (_, document) = call(&app(), Method::GET, "/openapi.json").await;
    let schemas = &document["components"]["schemas"];
    let body = &schemas["EnqueueBody"];
    let (fields, required) = properties(body);
    let max = fields["debounce_max_ms"]["type"].to_string();
    assert!(max.contains("integer"), "{body}");
    let on_conflict = fields["on_conflict"].to_string();
    assert!(
        on_conflict.contains("#/components/schemas/OnConflict"),
        "{body}"
    );
    assert_eq!(
        schemas["OnConflict"]["enum"],
        serde_json::json!(["keep", "replace", "debounce"]),
        "{}",
        schemas["OnConflict"]
    );
    for optional in ["on_conflict", "debounce_max_ms"] {
        assert!(!required.contains(&optional.into()), "{body}");
    }
    let batch = schemas["BatchBody"]["properties"]["messages"]["items"].to_string();
    assert!(batch.contains("EnqueueBody"), "{batch}");

    let answer = &schemas["EnqueueResult"];
    let (fields, required) = properties(answer);
    for field in ["replaced", "after_lease"] {
        assert_eq!(fields[field]["type"], "boolean", "{answer}");
        assert!(!required.contains(&field.into()), "{answer}");
    }
    let enqueue = &document["paths"]["/v1/queues/{queue}/messages"]["post"]["responses"];
    let conflict = &enqueue["409"];
    assert!(
        conflict["description"]
            .as_str()
            .is_some_and(|d| d.contains("invalid_state")),
        "{enqueue}"
    );
}
