//! Bounded property-based fuzzing of every route of the table with
//! generated request bodies, path parameters and queries, against the real
//! router over a `ModelBroker` (fresh per case) and a `LocalBroker` (one
//! store for the whole run, so requests also meet the states earlier ones
//! left behind).
//!
//! Bodies are arbitrary bytes, arbitrary JSON values, and structure-aware
//! mutations of each route's valid body: a field set to a value of another
//! type, a field removed, an unknown field added, numbers that are
//! negative, fractional, or beyond u64 written as raw JSON text, deep
//! nesting, long strings around the payload cap.
//!
//! Every answer must be below 500, and every non-2xx answer must be
//! api.md's `{"error": {"code", "message"}}` with a documented code. The
//! number of cases follows `PROPTEST_CASES` (scripts/test sets 64), so the
//! run is a few seconds; scripts/fuzz-http.sh runs it longer.

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::Request;
use axum::Router;
use delayd_core::testkit::ModelBroker;
use proptest::prelude::*;
use serde_json::{json, Value};
use tower::ServiceExt as _;

use super::{api_routes, Verb};
use crate::ServerOptions;

/// The error codes api.md documents, plus the router's own two.
const DOCUMENTED_CODES: &[&str] = &[
    "invalid_json",
    "invalid_argument",
    "unauthorized",
    "queue_not_found",
    "message_not_found",
    "schedule_not_found",
    "lease_mismatch",
    "invalid_state",
    "payload_too_large",
    "unavailable",
    "not_found",
    "method_not_allowed",
];

/// Small caps, so that strings around them are cheap to generate and a
/// lease call never waits long.
const MAX_PAYLOAD: usize = 2048;
const MAX_BODY: usize = 16 * 1024;

fn options() -> ServerOptions {
    ServerOptions {
        max_payload: MAX_PAYLOAD,
        max_body: MAX_BODY,
        max_wait_ms: 5,
        ..ServerOptions::default()
    }
}

/// One generated request.
#[derive(Debug, Clone)]
struct Fuzzed {
    route: usize,
    queue: String,
    id: String,
    query: String,
    body: Vec<u8>,
}

/// A valid body of the route, the base of the structure-aware mutations.
fn valid_body(verb: Verb, path: &str) -> Value {
    let enqueue = json!({"payload": "x", "id": "m2", "delay_ms": 0, "priority": 1,
        "headers": {"a": "b"}, "max_attempts": 3});
    match (verb, path.rsplit('/').next().unwrap_or_default()) {
        (Verb::Put, "{queue}") => json!({"lease_ms": 30000, "max_attempts": 10,
            "retry": {"initial_ms": 1000, "max_ms": 3600000, "multiplier": 2.0}, "push": null}),
        (Verb::Post, "messages") => enqueue,
        (Verb::Post, "batch") => json!({"messages": [enqueue, {"payload_base64": "eA=="}]}),
        (Verb::Patch, "{id}") => json!({"delay_ms": 10, "priority": 5}),
        (Verb::Post, "leases") => json!({"max": 2, "wait_ms": 0, "lease_ms": 1000}),
        (Verb::Post, "ack") => json!({"lease_id": "x"}),
        (Verb::Post, "acks") => json!({"acks": [{"id": "m", "lease_id": "x"}]}),
        (Verb::Post, "nack") => json!({"lease_id": "x", "delay_ms": 0}),
        (Verb::Post, "extend") => json!({"lease_id": "x", "lease_ms": 1000}),
        (Verb::Post, "redrive") => json!({"ids": ["m"]}),
        (Verb::Put, "{id}") => json!({"cron": "*/5 * * * *", "tz": "Europe/Paris",
            "start_at": 0, "end_at": 4_102_444_800_000u64, "max_fires": 3,
            "message": {"payload": "x", "priority": 1, "headers": {"a": "b"}, "max_attempts": 3},
            "catchup": "all", "catchup_window_ms": 60000, "overlap": "skip", "jitter_ms": 10,
            "paused": false}),
        (Verb::Post, "preview") => json!({"every_ms": 1000, "start_at": 0, "count": 3}),
        _ => json!({}),
    }
}

/// Numbers and tokens that `serde_json::Value` cannot hold or that sit on
/// the edges of the integer types, spliced into the JSON text as written.
const RAW_TOKENS: &[&str] = &[
    "-1",
    "0",
    "-0",
    "0.5",
    "1.0",
    "1e3",
    "1e400",
    "-1e400",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775809",
    "123456789012345678901234567890",
    "NaN",
    "true",
    "null",
    "\"\"",
    "[]",
    "{}",
];
const RAW_MARK: &str = "\u{1}raw";

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
        (0..RAW_TOKENS.len()).prop_map(|i| Value::String(format!("{RAW_MARK}{i}"))),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(field_name(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Field names of the API's bodies (so random objects hit real fields) and
/// random ones.
fn field_name() -> impl Strategy<Value = String> {
    const FIELDS: &[&str] = &[
        "payload",
        "payload_base64",
        "id",
        "delay_ms",
        "deliver_at",
        "priority",
        "headers",
        "max_attempts",
        "messages",
        "max",
        "wait_ms",
        "lease_ms",
        "lease_id",
        "acks",
        "ids",
        "retry",
        "initial_ms",
        "max_ms",
        "multiplier",
        "push",
        "url",
        "timeout_ms",
        "concurrency",
        "secret",
    ];
    prop_oneof![
        4 => prop::sample::select(FIELDS).prop_map(str::to_owned),
        1 => "[a-z_]{1,10}",
        // Any characters: keys of maps such as `headers` (a multi-byte
        // character in a header name once panicked a prefix check).
        1 => ".{1,10}",
    ]
}

/// Every object and array inside `value`, as JSON pointers.
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let here = format!("{at}/{key}");
                out.push(here.clone());
                pointers(child, here, out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                let here = format!("{at}/{i}");
                out.push(here.clone());
                pointers(child, here, out);
            }
        }
        _ => {}
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    /// Replace a field (or array item) with another value.
    Replace(Value),
    /// Remove a field.
    Remove,
    /// Add a field to the object at or around the chosen place.
    AddField(String, Value),
    /// Wrap the chosen value in this many arrays.
    Nest(usize),
    /// Replace with a string of this length (around the payload cap).
    LongString(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => json_value().prop_map(Mutation::Replace),
        2 => Just(Mutation::Remove),
        2 => (field_name(), json_value()).prop_map(|(k, v)| Mutation::AddField(k, v)),
        1 => (1usize..200).prop_map(Mutation::Nest),
        1 => prop_oneof![Just(MAX_PAYLOAD), Just(MAX_PAYLOAD + 1), 0..MAX_BODY]
            .prop_map(Mutation::LongString),
    ]
}

fn mutate(mut body: Value, choice: prop::sample::Index, mutations: &[Mutation]) -> Value {
    for m in mutations {
        let mut places = Vec::new();
        pointers(&body, String::new(), &mut places);
        let Some(place) = (!places.is_empty()).then(|| choice.get(&places).clone()) else {
            if let (Mutation::AddField(k, v), Value::Object(map)) = (m, &mut body) {
                map.insert(k.clone(), v.clone());
            }
            continue;
        };
        let (parent, key) = place.rsplit_once('/').unwrap_or(("", &place));
        let key = key.to_owned();
        let Some(target) = body.pointer_mut(&place) else {
            continue;
        };
        match m {
            Mutation::Replace(v) => *target = v.clone(),
            Mutation::Nest(depth) => {
                for _ in 0..*depth {
                    *target = Value::Array(vec![target.take()]);
                }
            }
            Mutation::LongString(len) => *target = Value::String("y".repeat(*len)),
            Mutation::Remove | Mutation::AddField(..) => {
                let Some(parent) = body.pointer_mut(parent) else {
                    continue;
                };
                match (m, parent) {
                    (Mutation::Remove, Value::Object(map)) => {
                        map.remove(&key);
                    }
                    (Mutation::AddField(k, v), Value::Object(map)) => {
                        map.insert(k.clone(), v.clone());
                    }
                    _ => {}
                }
            }
        }
    }
    body
}

/// The JSON text, with the raw-token markers replaced by their tokens.
fn render(value: &Value) -> Vec<u8> {
    let mut text = serde_json::to_string(value).unwrap_or_default();
    for (i, token) in RAW_TOKENS.iter().enumerate().rev() {
        text = text.replace(&format!("\"{RAW_MARK}{i}\""), token);
    }
    text.replace(RAW_MARK, "").into_bytes()
}

fn body(route: usize) -> impl Strategy<Value = Vec<u8>> {
    let routes = api_routes();
    let base = valid_body(routes[route].verb, routes[route].path);
    prop_oneof![
        1 => Just(Vec::new()),
        2 => prop::collection::vec(any::<u8>(), 0..256),
        3 => json_value().prop_map(|v| render(&v)),
        8 => (any::<prop::sample::Index>(), prop::collection::vec(mutation(), 1..4))
            .prop_map(move |(choice, ms)| render(&mutate(base.clone(), choice, &ms))),
    ]
}

fn path_param(known: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(known).prop_map(str::to_owned),
        1 => "[A-Za-z0-9._:%$()+;-]{0,24}",
        1 => Just("%2F..".to_owned()),
        1 => Just("a".repeat(257)),
    ]
}

fn query() -> impl Strategy<Value = String> {
    let pair = (
        prop::sample::select(&["limit", "after", "state", "from", "to", "buckets", "x"][..]),
        prop_oneof![
            Just("1".to_owned()),
            Just("0".to_owned()),
            Just("-1".to_owned()),
            Just("18446744073709551616".to_owned()),
            Just("ready".to_owned()),
            Just("dead".to_owned()),
            "[a-z0-9%]{0,8}",
        ],
    );
    prop::collection::vec(pair, 0..4).prop_map(|pairs| {
        pairs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&")
    })
}

fn fuzzed() -> impl Strategy<Value = Fuzzed> {
    (0..api_routes().len()).prop_flat_map(|route| {
        (
            path_param(&["q", "empty", "-bad"]),
            path_param(&["m", "d", "gone"]),
            query(),
            body(route),
        )
            .prop_map(move |(queue, id, query, body)| Fuzzed {
                route,
                queue,
                id,
                query,
                body,
            })
    })
}

fn request(case: &Fuzzed) -> Option<Request<Body>> {
    let route = &api_routes()[case.route];
    let mut uri = route
        .path
        .replace("{queue}", &case.queue)
        .replace("{id}", &case.id)
        .replace("{key}", &case.id);
    if !case.query.is_empty() {
        uri = format!("{uri}?{}", case.query);
    }
    Request::builder()
        .method(route.verb.method())
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(case.body.clone()))
        .ok()
}

/// Sends the case and checks the answer; `Err` describes a finding.
async fn check(app: &Router, case: &Fuzzed) -> Result<(), String> {
    // A generated path that is not a valid URI never reaches a server.
    let Some(request) = request(case) else {
        return Ok(());
    };
    let Ok(response) = app.clone().oneshot(request).await;
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .map_err(|e| format!("unreadable body: {e}"))?;
    let what = || format!("{status} {}", String::from_utf8_lossy(&bytes));
    if status.is_server_error() {
        return Err(format!("server error: {}", what()));
    }
    if status.is_success() {
        return Ok(());
    }
    let body: Value =
        serde_json::from_slice(&bytes).map_err(|_| format!("non-JSON error: {}", what()))?;
    let (code, message) = (&body["error"]["code"], &body["error"]["message"]);
    let documented = code.as_str().is_some_and(|c| DOCUMENTED_CODES.contains(&c));
    let only_error = body.as_object().is_some_and(|o| o.len() == 1);
    if !documented || !message.is_string() || !only_error {
        return Err(format!("undocumented error shape: {}", what()));
    }
    Ok(())
}

async fn seed(app: &Router) {
    let calls = [
        ("PUT", "/v1/queues/q", json!({})),
        ("PUT", "/v1/queues/empty", json!({})),
        (
            "POST",
            "/v1/queues/q/messages",
            json!({"id": "m", "payload": "x"}),
        ),
        (
            "POST",
            "/v1/queues/q/messages",
            json!({"id": "d", "payload": "y", "delay_ms": 60000}),
        ),
        (
            "POST",
            "/v1/queues/q/leases",
            json!({"max": 1, "lease_ms": 60000}),
        ),
    ];
    for (method, uri, body) in calls {
        let status = send(app, method, uri, &body).await;
        assert!(status.is_success(), "seed {method} {uri}");
    }
    // A schedule `m`, so the schedule routes meet an existing one too.
    let schedule = json!({"every_ms": 60000, "message": {"payload": "s"}});
    let status = send(app, "PUT", "/v1/queues/q/schedules/m", &schedule).await;
    assert!(status.is_success(), "seed schedule: {status}");
}

async fn send(app: &Router, method: &str, uri: &str, body: &Value) -> axum::http::StatusCode {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("a valid seed request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    response.status()
}

struct Fixture {
    runtime: tokio::runtime::Runtime,
    local: Router,
    _dir: tempfile::TempDir,
}

/// The LocalBroker app is shared by every case of the run.
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let local = runtime.block_on(async {
            let mut config = delayd_local::LocalConfig::new(dir.path());
            config.durability = delayd_local::Durability::Never;
            let broker = delayd_local::LocalBroker::open(config)
                .await
                .expect("open the store");
            let app = crate::app(Arc::new(broker), options());
            seed(&app).await;
            app
        });
        Fixture {
            runtime,
            local,
            _dir: dir,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_route_answers_fuzzed_requests_without_5xx_in_the_documented_shape(
        case in fuzzed()
    ) {
        let fixture = fixture();
        let found = fixture.runtime.block_on(async {
            let model = crate::app(Arc::new(ModelBroker::new()), options());
            seed(&model).await;
            check(&model, &case).await.map_err(|e| format!("ModelBroker: {e}"))?;
            check(&fixture.local, &case).await.map_err(|e| format!("LocalBroker: {e}"))
        });
        let route = &api_routes()[case.route];
        prop_assert!(
            found.is_ok(),
            "{:?} {} (queue {:?}, id {:?}, query {:?}) body {:?}: {}",
            route.verb, route.path, case.queue, case.id, case.query,
            String::from_utf8_lossy(&case.body), found.unwrap_err()
        );
    }
}
