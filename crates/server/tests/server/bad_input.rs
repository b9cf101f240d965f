//! Table-driven bad input: each case checks the status, the error code, and
//! that the store (every queue's stats and every message) is unchanged.

use crate::common;

use delayd_core::testkit::support::list_by_state;
use delayd_core::QueueName;
use delayd_server::ServerOptions;
use serde_json::{json, Value};

use crate::common::{raw_http, Server};

mod replace;
mod retention;
mod shape;

const TOKEN: &str = "t0ken";
const MAX_PAYLOAD: usize = 1024;
const MAX_BODY: usize = 256 * 1024;
const TEN_YEARS_MS: u64 = 3650 * 24 * 3600 * 1000;

struct Case {
    name: &'static str,
    method: &'static str,
    path: String,
    body: Vec<u8>,
    headers: Vec<(&'static str, String)>,
    status: u16,
    code: &'static str,
}

fn case(
    name: &'static str,
    method: &'static str,
    path: &str,
    body: impl Into<Body>,
    status: u16,
    code: &'static str,
) -> Case {
    Case {
        name,
        method,
        path: path.to_owned(),
        body: body.into().0,
        headers: vec![("authorization", format!("Bearer {TOKEN}"))],
        status,
        code,
    }
}

struct Body(Vec<u8>);
impl From<&str> for Body {
    fn from(s: &str) -> Self {
        Body(s.as_bytes().to_vec())
    }
}
impl From<Value> for Body {
    fn from(v: Value) -> Self {
        Body(serde_json::to_vec(&v).unwrap())
    }
}
impl From<String> for Body {
    fn from(s: String) -> Self {
        Body(s.into_bytes())
    }
}

/// Everything a client could observe about the store.
async fn snapshot(s: &Server) -> Value {
    let queues = s
        .raw(
            "GET",
            "/v1/queues",
            Vec::new(),
            &[("authorization", &format!("Bearer {TOKEN}"))],
        )
        .await;
    let q = QueueName::new("q").unwrap();
    let mut messages = Vec::new();
    for (_, list) in list_by_state(s.broker.as_ref(), &q, 1000).await {
        for m in list {
            messages.push(json!([
                m.id.as_str(),
                m.state.as_str(),
                m.seq,
                m.deliver_at,
                m.priority,
                m.attempts,
                m.lease_until,
                m.payload
            ]));
        }
    }
    // A backend without schedules answers an error here; that stays equal.
    let schedules = match s.broker.list_schedules(&q).await {
        Ok(list) => json!(list
            .iter()
            .map(|r| json!([
                r.id.as_str(),
                r.revision,
                r.next_fire_at,
                r.definition.paused
            ]))
            .collect::<Vec<_>>()),
        Err(err) => json!(err.code()),
    };
    json!({"queues": queues.body, "messages": messages, "schedules": schedules})
}

/// q holds: `lm` leased, `m` ready, `s` scheduled; `acked` was acked.
async fn setup(s: &Server) -> String {
    let auth = format!("Bearer {TOKEN}");
    let h = [("authorization", auth.as_str())];
    let post = |path: &'static str, body: Value| {
        let body = serde_json::to_vec(&body).unwrap();
        async move { s.raw("POST", path, body, &h).await }
    };
    assert_eq!(
        post(
            "/v1/queues/q/messages",
            json!({"id": "lm", "payload": "l", "priority": 0})
        )
        .await
        .status,
        201
    );
    let lm = post("/v1/queues/q/leases", json!({})).await;
    assert_eq!(lm.body["messages"][0]["id"], "lm");
    assert_eq!(
        post(
            "/v1/queues/q/messages",
            json!({"id": "acked", "payload": "a", "priority": 0})
        )
        .await
        .status,
        201
    );
    let acked = post("/v1/queues/q/leases", json!({})).await;
    let acked_lease = acked.body["messages"][0]["lease_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = s
        .raw(
            "POST",
            "/v1/queues/q/messages/acked/ack",
            serde_json::to_vec(&json!({"lease_id": acked_lease})).unwrap(),
            &h,
        )
        .await;
    assert_eq!(r.status, 204);
    assert_eq!(
        post(
            "/v1/queues/q/messages",
            json!({"id": "m", "payload": "x", "priority": 5})
        )
        .await
        .status,
        201
    );
    assert_eq!(
        post(
            "/v1/queues/q/messages",
            json!({"id": "s", "payload": "y", "delay_ms": 3_600_000})
        )
        .await
        .status,
        201
    );
    acked_lease
}

fn cases(acked_lease: &str) -> Vec<Case> {
    let enq = "/v1/queues/q/messages";
    let far = 4_102_444_800_000u64 + TEN_YEARS_MS; // well past now + 10 years
    let big = "x".repeat(MAX_PAYLOAD + 1);
    let many: Vec<Value> = (0..1001).map(|_| json!({"payload": ""})).collect();
    let mut cases = vec![
        case(
            "truncated JSON",
            "POST",
            enq,
            r#"{"payload":"#,
            400,
            "invalid_json",
        ),
        case("not JSON", "POST", enq, "hello", 400, "invalid_json"),
        case(
            "delay as string",
            "POST",
            enq,
            json!({"payload": "p", "delay_ms": "10"}),
            400,
            "invalid_argument",
        ),
        case(
            "fractional delay",
            "POST",
            enq,
            r#"{"payload":"p","delay_ms":1.5}"#,
            400,
            "invalid_argument",
        ),
        case(
            "negative delay",
            "POST",
            enq,
            json!({"payload": "p", "delay_ms": -1}),
            400,
            "invalid_argument",
        ),
        case(
            "delay beyond u64",
            "POST",
            enq,
            r#"{"payload":"p","delay_ms":18446744073709551616}"#,
            400,
            "invalid_argument",
        ),
        case(
            "delay over max",
            "POST",
            enq,
            json!({"payload": "p", "delay_ms": TEN_YEARS_MS + 1}),
            400,
            "invalid_argument",
        ),
        case(
            "deliver_at over max",
            "POST",
            enq,
            json!({"payload": "p", "deliver_at": far}),
            400,
            "invalid_argument",
        ),
        case(
            "delay and deliver_at",
            "POST",
            enq,
            json!({"payload": "p", "delay_ms": 1, "deliver_at": 1}),
            400,
            "invalid_argument",
        ),
        case(
            "missing payload",
            "POST",
            enq,
            json!({"id": "new"}),
            400,
            "invalid_argument",
        ),
        case("empty body", "POST", enq, "", 400, "invalid_argument"),
        case(
            "both payload kinds",
            "POST",
            enq,
            json!({"payload": "p", "payload_base64": "cA=="}),
            400,
            "invalid_argument",
        ),
        case(
            "bad base64",
            "POST",
            enq,
            json!({"payload_base64": "***"}),
            400,
            "invalid_argument",
        ),
        case(
            "payload over the limit",
            "POST",
            enq,
            json!({"payload": big}),
            413,
            "payload_too_large",
        ),
        case(
            "body over the limit",
            "POST",
            enq,
            "x".repeat(MAX_BODY + 1),
            413,
            "payload_too_large",
        ),
        case(
            "unknown field",
            "POST",
            enq,
            json!({"payload": "p", "dealy_ms": 1000}),
            400,
            "invalid_argument",
        ),
        case(
            "delayd- header",
            "POST",
            enq,
            json!({"payload": "p", "headers": {"delayd-x": "1"}}),
            400,
            "invalid_argument",
        ),
        case(
            // A multi-byte character across byte 7 (the length of
            // "delayd-") once panicked the reserved-prefix check
            // (found by schemathesis).
            "header name with a character across byte 7",
            "POST",
            enq,
            json!({"payload": "p", "headers": {"abcdef\u{e9}": "1"}}),
            400,
            "invalid_argument",
        ),
        case(
            "Delayd- header any case",
            "POST",
            enq,
            json!({"payload": "p", "headers": {"DelayD-Id": "1"}}),
            400,
            "invalid_argument",
        ),
        case(
            "priority over u32",
            "POST",
            enq,
            json!({"payload": "p", "priority": 4_294_967_296u64}),
            400,
            "invalid_argument",
        ),
        case(
            "bad queue name",
            "POST",
            "/v1/queues/bad%20name/messages",
            json!({"payload": "p"}),
            400,
            "invalid_argument",
        ),
        case(
            "overlong queue name",
            "PUT",
            &format!("/v1/queues/{}", "q".repeat(201)),
            "",
            400,
            "invalid_argument",
        ),
        case(
            "overlong id in body",
            "POST",
            enq,
            json!({"id": "i".repeat(257), "payload": "p"}),
            400,
            "invalid_argument",
        ),
        case(
            "overlong id in path",
            "GET",
            &format!("/v1/queues/q/messages/{}", "i".repeat(257)),
            "",
            400,
            "invalid_argument",
        ),
        case(
            "bad id chars",
            "POST",
            enq,
            json!({"id": "a b", "payload": "p"}),
            400,
            "invalid_argument",
        ),
        case(
            "batch too large",
            "POST",
            "/v1/queues/q/batch",
            json!({"messages": many}),
            400,
            "invalid_argument",
        ),
        case(
            "batch unknown field",
            "POST",
            "/v1/queues/q/batch",
            json!({"messages": [], "x": 1}),
            400,
            "invalid_argument",
        ),
        case(
            "unknown lease",
            "POST",
            "/v1/queues/q/messages/lm/ack",
            json!({"lease_id": "nope"}),
            409,
            "lease_mismatch",
        ),
        case(
            "ack of a ready message",
            "POST",
            "/v1/queues/q/messages/m/ack",
            json!({"lease_id": "nope"}),
            409,
            "lease_mismatch",
        ),
        case(
            "double ack",
            "POST",
            "/v1/queues/q/messages/acked/ack",
            json!({"lease_id": acked_lease}),
            404,
            "message_not_found",
        ),
        case(
            "ack without lease_id",
            "POST",
            "/v1/queues/q/messages/lm/ack",
            json!({}),
            400,
            "invalid_argument",
        ),
        case(
            "nack unknown lease",
            "POST",
            "/v1/queues/q/messages/lm/nack",
            json!({"lease_id": "nope"}),
            409,
            "lease_mismatch",
        ),
        case(
            "extend unknown lease",
            "POST",
            "/v1/queues/q/messages/lm/extend",
            json!({"lease_id": "nope"}),
            409,
            "lease_mismatch",
        ),
        case(
            "unknown message",
            "GET",
            "/v1/queues/q/messages/ghost",
            "",
            404,
            "message_not_found",
        ),
        case(
            "cancel unknown message",
            "DELETE",
            "/v1/queues/q/messages/ghost",
            "",
            404,
            "message_not_found",
        ),
        case(
            "patch leased",
            "PATCH",
            "/v1/queues/q/messages/lm",
            json!({"priority": 1}),
            409,
            "invalid_state",
        ),
        case(
            "patch both delays",
            "PATCH",
            "/v1/queues/q/messages/s",
            json!({"delay_ms": 1, "deliver_at": 1}),
            400,
            "invalid_argument",
        ),
        case(
            "unknown queue",
            "GET",
            "/v1/queues/ghost",
            "",
            404,
            "queue_not_found",
        ),
        case(
            "lease max 0",
            "POST",
            "/v1/queues/q/leases",
            json!({"max": 0}),
            400,
            "invalid_argument",
        ),
        case(
            "lease max 1001",
            "POST",
            "/v1/queues/q/leases",
            json!({"max": 1001}),
            400,
            "invalid_argument",
        ),
        case(
            "lease wait too long",
            "POST",
            "/v1/queues/q/leases",
            json!({"wait_ms": 60001}),
            400,
            "invalid_argument",
        ),
        case(
            // A lease longer than --max-delay once leased the message
            // until the end of u64 time (found by schemathesis).
            "lease lease_ms beyond max delay",
            "POST",
            "/v1/queues/q/leases",
            json!({"lease_ms": u64::MAX}),
            400,
            "invalid_argument",
        ),
        case(
            "lease typo",
            "POST",
            "/v1/queues/q/leases",
            json!({"wait": 1}),
            400,
            "invalid_argument",
        ),
        case(
            "dead limit too big",
            "GET",
            "/v1/queues/q/dead?limit=1001",
            "",
            400,
            "invalid_argument",
        ),
        case(
            "dead limit not a number",
            "GET",
            "/v1/queues/q/dead?limit=ten",
            "",
            400,
            "invalid_argument",
        ),
        case(
            "dead unknown param",
            "GET",
            "/v1/queues/q/dead?limt=5",
            "",
            400,
            "invalid_argument",
        ),
        case(
            "retry multiplier below 1",
            "PUT",
            "/v1/queues/q",
            json!({"retry": {"multiplier": 0.5}}),
            400,
            "invalid_argument",
        ),
        case(
            "queue max_attempts 0",
            "PUT",
            "/v1/queues/q",
            json!({"max_attempts": 0}),
            400,
            "invalid_argument",
        ),
        case(
            "queue lease_ms 0",
            "PUT",
            "/v1/queues/q",
            json!({"lease_ms": 0}),
            400,
            "invalid_argument",
        ),
        case(
            "queue lease_ms beyond max delay",
            "PUT",
            "/v1/queues/q",
            json!({"lease_ms": 315_360_000_001u64}),
            400,
            "invalid_argument",
        ),
        case(
            "retry initial_ms 0",
            "PUT",
            "/v1/queues/q",
            json!({"retry": {"initial_ms": 0}}),
            400,
            "invalid_argument",
        ),
        case(
            "retry max_ms below initial_ms",
            "PUT",
            "/v1/queues/q",
            json!({"retry": {"initial_ms": 5000, "max_ms": 10}}),
            400,
            "invalid_argument",
        ),
        case(
            "queue unknown field",
            "PUT",
            "/v1/queues/q",
            json!({"lease": 5}),
            400,
            "invalid_argument",
        ),
        case(
            "lease_ms fraction",
            "PUT",
            "/v1/queues/q",
            json!({"lease_ms": 1.5}),
            400,
            "invalid_argument",
        ),
        case(
            "push url with user info",
            "PUT",
            "/v1/queues/q",
            json!({"push": {"url": "http://user:pw@127.0.0.1:9/"}}),
            400,
            "invalid_argument",
        ),
        case(
            "push header delayd-*",
            "PUT",
            "/v1/queues/q",
            json!({"push": {"url": "http://127.0.0.1:9/", "headers": {"delayd-id": "x"}}}),
            400,
            "invalid_argument",
        ),
        case(
            "push header value with a line break",
            "PUT",
            "/v1/queues/q",
            json!({"push": {"url": "http://127.0.0.1:9/", "headers": {"x": "a\nb"}}}),
            400,
            "invalid_argument",
        ),
        case(
            "push headers over 16",
            "PUT",
            "/v1/queues/q",
            json!({"push": {"url": "http://127.0.0.1:9/", "headers": (0..17).map(|i| (format!("x-{i}"), json!("v"))).collect::<serde_json::Map<String, Value>>()}}),
            400,
            "invalid_argument",
        ),
        case(
            "push not allowed",
            "PUT",
            "/v1/queues/q",
            json!({"push": {"url": "http://169.254.169.254/"}}),
            400,
            "invalid_argument",
        ),
        case("unknown route", "GET", "/v1/nope", "", 404, "not_found"),
        case(
            "unknown top-level route",
            "GET",
            "/nope",
            "",
            404,
            "not_found",
        ),
        case(
            "wrong method",
            "DELETE",
            "/v1/queues/q/leases",
            "",
            405,
            "method_not_allowed",
        ),
        case(
            "wrong method on queue",
            "POST",
            "/v1/queues/q",
            "",
            405,
            "method_not_allowed",
        ),
    ];
    let mut wrong = case("wrong token", "GET", "/v1/queues", "", 401, "unauthorized");
    wrong.headers = vec![("authorization", "Bearer nope".into())];
    let mut missing = case(
        "missing token",
        "POST",
        enq,
        json!({"payload": "p"}),
        401,
        "unauthorized",
    );
    missing.headers.clear();
    let mut metrics = case(
        "metrics without token",
        "GET",
        "/metrics",
        "",
        401,
        "unauthorized",
    );
    metrics.headers.clear();
    let mut basic = case(
        "basic instead of bearer",
        "GET",
        "/v1/queues",
        "",
        401,
        "unauthorized",
    );
    basic.headers = vec![("authorization", format!("Basic {TOKEN}"))];
    cases.extend([wrong, missing, metrics, basic]);
    cases
}

/// A schedule case: 400 `invalid_argument` whose message names `field`.
struct FieldCase {
    name: &'static str,
    method: &'static str,
    path: &'static str,
    body: Value,
    field: &'static str,
}

fn field_case(
    name: &'static str,
    path: &'static str,
    body: Value,
    field: &'static str,
) -> FieldCase {
    let method = if path.ends_with("/preview") {
        "POST"
    } else {
        "PUT"
    };
    FieldCase {
        name,
        method,
        path,
        body,
        field,
    }
}

/// api.md's schedule 400 rules (and the strict-body and enqueue rules of
/// the template), each naming its field.
fn schedule_cases() -> Vec<FieldCase> {
    let put = "/v1/queues/q/schedules/s";
    let preview = "/v1/schedules/preview";
    let msg = json!({"payload": "p"});
    vec![
        field_case(
            "cron does not parse",
            put,
            json!({"cron": "61 * * * *", "message": msg}),
            "cron",
        ),
        field_case(
            "cron garbage",
            put,
            json!({"cron": "every day", "message": msg}),
            "cron",
        ),
        field_case(
            "cron never fires",
            put,
            json!({"cron": "0 0 30 2 *", "message": msg}),
            "cron",
        ),
        field_case(
            "unknown tz",
            put,
            json!({"cron": "@daily", "tz": "Mars/Olympus", "message": msg}),
            "tz",
        ),
        field_case(
            "tz with every_ms",
            put,
            json!({"every_ms": 60000, "tz": "UTC", "message": msg}),
            "tz",
        ),
        field_case(
            "every_ms below 1000",
            put,
            json!({"every_ms": 999, "message": msg}),
            "every_ms",
        ),
        field_case(
            "cron and every_ms",
            put,
            json!({"cron": "@daily", "every_ms": 60000, "message": msg}),
            "every_ms",
        ),
        field_case(
            "neither cron nor every_ms",
            put,
            json!({"message": msg}),
            "cron",
        ),
        field_case(
            "end_at not after start_at",
            put,
            json!({"every_ms": 1000, "start_at": 5000, "end_at": 5000, "message": msg}),
            "end_at",
        ),
        field_case(
            "max_fires 0",
            put,
            json!({"every_ms": 1000, "max_fires": 0, "message": msg}),
            "max_fires",
        ),
        field_case(
            "message without payload",
            put,
            json!({"every_ms": 1000, "message": {}}),
            "payload",
        ),
        field_case(
            "message with id",
            put,
            json!({"every_ms": 1000, "message": {"payload": "p", "id": "x"}}),
            "id",
        ),
        field_case(
            "message with delay_ms",
            put,
            json!({"every_ms": 1000, "message": {"payload": "p", "delay_ms": 5}}),
            "delay_ms",
        ),
        field_case(
            "message with deliver_at",
            put,
            json!({"every_ms": 1000, "message": {"payload": "p", "deliver_at": 5}}),
            "deliver_at",
        ),
        field_case(
            "message delayd- header",
            put,
            json!({"every_ms": 1000, "message": {"payload": "p", "headers": {"Delayd-X": "1"}}}),
            "header",
        ),
        field_case(
            "message max_attempts 0",
            put,
            json!({"every_ms": 1000, "message": {"payload": "p", "max_attempts": 0}}),
            "max_attempts",
        ),
        field_case(
            "unknown field",
            put,
            json!({"every_ms": 1000, "jiter_ms": 5, "message": msg}),
            "jiter_ms",
        ),
        field_case(
            "catchup unknown",
            put,
            json!({"every_ms": 1000, "catchup": "some", "message": msg}),
            "catchup",
        ),
        field_case(
            "overlap unknown",
            put,
            json!({"every_ms": 1000, "overlap": "queue", "message": msg}),
            "overlap",
        ),
        field_case(
            "jitter_ms beyond max delay",
            put,
            json!({"every_ms": 1000, "jitter_ms": TEN_YEARS_MS + 1, "message": msg}),
            "jitter_ms",
        ),
        field_case(
            "schedule id with a colon",
            "/v1/queues/q/schedules/a:b",
            json!({"every_ms": 1000, "message": msg}),
            "schedule id",
        ),
        field_case(
            "preview count 0",
            preview,
            json!({"every_ms": 1000, "count": 0}),
            "count",
        ),
        field_case(
            "preview count 101",
            preview,
            json!({"every_ms": 1000, "count": 101}),
            "count",
        ),
        field_case("preview neither", preview, json!({"count": 3}), "cron"),
        field_case(
            "preview bad cron",
            preview,
            json!({"cron": "* * *"}),
            "cron",
        ),
        field_case(
            "preview unknown tz",
            preview,
            json!({"cron": "@hourly", "tz": "Nowhere"}),
            "tz",
        ),
        field_case(
            "preview tz with every_ms",
            preview,
            json!({"every_ms": 1000, "tz": "UTC"}),
            "tz",
        ),
        field_case(
            "preview every_ms below 1000",
            preview,
            json!({"every_ms": 10}),
            "every_ms",
        ),
        field_case(
            "preview unknown field",
            preview,
            json!({"every_ms": 1000, "limit": 3}),
            "limit",
        ),
    ]
}

#[tokio::test]
async fn schedule_bad_input_names_the_field_model() {
    schedule_bad_input_names_the_field(common::model()).await;
}

#[tokio::test]
async fn schedule_bad_input_names_the_field_local() {
    let (broker, _dir) = common::local_broker().await;
    schedule_bad_input_names_the_field(broker).await;
}

async fn schedule_bad_input_names_the_field(broker: std::sync::Arc<dyn delayd_core::Broker>) {
    let s = common::start(broker, ServerOptions::default()).await;
    assert_eq!(s.call("PUT", "/v1/queues/q", None).await.status, 201);
    let before = snapshot(&s).await;
    let mut failures = Vec::new();
    for c in schedule_cases() {
        let r = s.call(c.method, c.path, Some(c.body)).await;
        let message = r.body["error"]["message"].as_str().unwrap_or_default();
        if (r.status, r.code()) != (400, "invalid_argument") || !message.contains(c.field) {
            failures.push(format!(
                "{}: got {} {}, want 400 invalid_argument naming {:?}",
                c.name, r.status, r.body, c.field
            ));
        }
        if snapshot(&s).await != before {
            failures.push(format!("{}: changed the store", c.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    s.stop().await.unwrap();
}

/// A flow control case: 400 `invalid_argument` whose message names `field`.
struct FlowCase {
    name: &'static str,
    method: &'static str,
    path: String,
    body: Option<Value>,
    field: &'static str,
}

fn flow_put(name: &'static str, flow: Value, field: &'static str) -> FlowCase {
    FlowCase {
        name,
        method: "PUT",
        path: "/v1/queues/q".into(),
        body: Some(json!({ "flow": flow })),
        field,
    }
}

/// api.md's flow control 400 rules, each naming its field.
fn flow_cases() -> Vec<FlowCase> {
    let rate = |limit: u64, period_ms: u64| json!({"limit": limit, "period_ms": period_ms});
    let long_key = "k".repeat(257);
    let enqueue = |name, key: &str| FlowCase {
        name,
        method: "POST",
        path: "/v1/queues/q/messages".into(),
        body: Some(json!({"payload": "p", "key": key})),
        field: "key",
    };
    let key_path = |name, key: &str| FlowCase {
        name,
        method: "GET",
        path: format!("/v1/queues/q/keys/{key}"),
        body: None,
        field: "key",
    };
    vec![
        flow_put(
            "rate limit 0",
            json!({"rate": rate(0, 1000)}),
            "flow.rate.limit",
        ),
        flow_put(
            "rate limit above 1000000",
            json!({"rate": rate(1_000_001, 1000)}),
            "flow.rate.limit",
        ),
        flow_put(
            "rate limit beyond u32",
            json!({"rate": rate(1 << 32, 1000)}),
            "flow.rate.limit",
        ),
        flow_put(
            "rate period_ms 0",
            json!({"rate": rate(1, 0)}),
            "flow.rate.period_ms",
        ),
        flow_put(
            "rate period_ms above a day",
            json!({"rate": rate(1, 86_400_001)}),
            "flow.rate.period_ms",
        ),
        flow_put(
            "rate burst 0",
            json!({"rate": {"limit": 1, "period_ms": 1000, "burst": 0}}),
            "flow.rate.burst",
        ),
        flow_put(
            "key_rate limit 0",
            json!({"key_rate": rate(0, 1000)}),
            "flow.key_rate.limit",
        ),
        flow_put(
            "key_rate period_ms above a day",
            json!({"key_rate": rate(5, 86_400_001)}),
            "flow.key_rate.period_ms",
        ),
        flow_put(
            "key_rate burst 0",
            json!({"key_rate": {"limit": 1, "period_ms": 1000, "burst": 0}}),
            "flow.key_rate.burst",
        ),
        flow_put(
            "concurrency 0",
            json!({"concurrency": 0}),
            "flow.concurrency",
        ),
        flow_put(
            "key_concurrency 0",
            json!({"key_concurrency": 0}),
            "flow.key_concurrency",
        ),
        flow_put(
            "max_deferrals above 10000",
            json!({"max_deferrals": 10_001}),
            "flow.max_deferrals",
        ),
        flow_put(
            "ordered with key_concurrency 2",
            json!({"ordered": true, "key_concurrency": 2}),
            "flow.key_concurrency",
        ),
        flow_put(
            "flow unknown field",
            json!({"key_concurency": 2}),
            "key_concurency",
        ),
        flow_put(
            "rate unknown field",
            json!({"rate": {"limit": 1, "period_ms": 1000, "brust": 2}}),
            "brust",
        ),
        flow_put(
            "rate without period_ms",
            json!({"rate": {"limit": 1}}),
            "period_ms",
        ),
        enqueue("enqueue empty key", ""),
        enqueue("enqueue key over 256 bytes", &long_key),
        enqueue("enqueue key with a control character", "a\u{7}b"),
        FlowCase {
            name: "schedule template key with a line break",
            method: "PUT",
            path: "/v1/queues/q/schedules/s".into(),
            body: Some(json!({"every_ms": 1000, "message": {"payload": "p", "key": "a\nb"}})),
            field: "key",
        },
        key_path("key path with a control character", "a%01b"),
        key_path("key path over 256 bytes", &long_key),
    ]
}

#[tokio::test]
async fn flow_bad_input_names_the_field_model() {
    flow_bad_input_names_the_field(common::model()).await;
}

#[tokio::test]
async fn flow_bad_input_names_the_field_local() {
    let (broker, _dir) = common::local_broker().await;
    flow_bad_input_names_the_field(broker).await;
}

async fn flow_bad_input_names_the_field(broker: std::sync::Arc<dyn delayd_core::Broker>) {
    let s = common::start(broker, ServerOptions::default()).await;
    assert_eq!(s.call("PUT", "/v1/queues/q", None).await.status, 201);
    let before = snapshot(&s).await;
    let mut failures = Vec::new();
    for c in flow_cases() {
        let r = s.call(c.method, &c.path, c.body).await;
        let message = r.body["error"]["message"].as_str().unwrap_or_default();
        if (r.status, r.code()) != (400, "invalid_argument") || !message.contains(c.field) {
            failures.push(format!(
                "{}: got {} {}, want 400 invalid_argument naming {:?}",
                c.name, r.status, r.body, c.field
            ));
        }
        if snapshot(&s).await != before {
            failures.push(format!("{}: changed the store", c.name));
        }
    }
    // A batch answers a bad key in the item's own slot, naming it.
    let r = s
        .call(
            "POST",
            "/v1/queues/q/batch",
            Some(json!({"messages": [{"payload": "p", "key": ""}]})),
        )
        .await;
    let item = &r.body["results"][0]["error"];
    if r.status != 200
        || item["code"] != "invalid_argument"
        || !item["message"].as_str().unwrap_or_default().contains("key")
    {
        failures.push(format!(
            "batch item with an empty key: got {} {}",
            r.status, r.body
        ));
    }
    assert_eq!(
        snapshot(&s).await,
        before,
        "a refused request changed the store"
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    s.stop().await.unwrap();
}

#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing_model() {
    bad_input_is_refused_and_changes_nothing(common::model()).await;
}

#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing_local() {
    let (broker, _dir) = common::local_broker().await;
    bad_input_is_refused_and_changes_nothing(broker).await;
}

async fn bad_input_is_refused_and_changes_nothing(broker: std::sync::Arc<dyn delayd_core::Broker>) {
    let options = ServerOptions {
        tokens: vec!["other".into(), TOKEN.into()],
        max_payload: MAX_PAYLOAD,
        max_body: MAX_BODY,
        ..ServerOptions::default()
    };
    let s = common::start(broker, options).await;
    let acked_lease = setup(&s).await;
    let before = snapshot(&s).await;
    let mut failures = Vec::new();
    for c in cases(&acked_lease) {
        let headers: Vec<(&str, &str)> = c.headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = s.raw(c.method, &c.path, c.body.clone(), &headers).await;
        let code = r.body["error"]["code"]
            .as_str()
            .unwrap_or("<none>")
            .to_owned();
        if r.status != c.status || code != c.code {
            failures.push(format!(
                "{}: got {} {code} ({}), want {} {}",
                c.name, r.status, r.body, c.status, c.code
            ));
        }
        if snapshot(&s).await != before {
            failures.push(format!("{}: changed the store", c.name));
        }
    }
    for (path, name) in [
        ("/v1/queues/./messages", "dot"),
        ("/v1/queues/../messages", "dotdot"),
    ] {
        let (status, body) =
            raw_http(s.addr, "POST", path, r#"{"payload":"p"}"#, Some(TOKEN)).await;
        if (status, body["error"]["code"].as_str()) != (400, Some("invalid_argument")) {
            failures.push(format!("{name}: got {status} {body}"));
        }
    }
    assert_eq!(snapshot(&s).await, before);
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    s.stop().await.unwrap();
}

#[tokio::test]
async fn open_routes_and_content_type() {
    let options = ServerOptions {
        tokens: vec![TOKEN.into()],
        ..ServerOptions::default()
    };
    let s = common::start(common::model(), options).await;
    for path in ["/healthz", "/readyz", "/openapi.json"] {
        assert_eq!(
            s.call("GET", path, None).await.status,
            200,
            "{path} must stay open"
        );
    }
    // Parsed as JSON whatever the content-type says.
    let auth = format!("Bearer {TOKEN}");
    let r = s
        .raw(
            "POST",
            "/v1/queues/q/messages",
            br#"{"payload":"p"}"#.to_vec(),
            &[("authorization", &auth), ("content-type", "text/plain")],
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = s
        .raw("GET", "/metrics", Vec::new(), &[("authorization", &auth)])
        .await;
    assert_eq!(r.status, 200);
    // A 405 keeps its Allow header alongside the JSON body.
    let r = s
        .raw(
            "DELETE",
            "/v1/queues/q/leases",
            Vec::new(),
            &[("authorization", &auth)],
        )
        .await;
    assert_eq!((r.status, r.code()), (405, "method_not_allowed"));
    assert_eq!(
        r.headers.get("allow").map(|v| v.to_str().unwrap()),
        Some("POST")
    );
    let content_type = r.headers.get("content-type").map(|v| v.to_str().unwrap());
    assert_eq!(content_type, Some("application/json"));
    s.stop().await.unwrap();
}

#[tokio::test]
async fn no_auto_create_refuses_unknown_queues() {
    let options = ServerOptions {
        auto_create: false,
        ..ServerOptions::default()
    };
    let s = common::start(common::model(), options).await;
    let r = s
        .call(
            "POST",
            "/v1/queues/new/messages",
            Some(json!({"payload": "p"})),
        )
        .await;
    assert_eq!((r.status, r.code()), (404, "queue_not_found"));
    let r = s.call("GET", "/v1/queues", None).await;
    assert_eq!(r.body["queues"], json!([]));
    assert_eq!(s.call("PUT", "/v1/queues/new", None).await.status, 201);
    let r = s
        .call(
            "POST",
            "/v1/queues/new/messages",
            Some(json!({"payload": "p"})),
        )
        .await;
    assert_eq!(r.status, 201);
    s.stop().await.unwrap();
}
