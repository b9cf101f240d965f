//! Bodies of the wrong shape: each is 400 `invalid_argument` (a batch
//! item: an error in its own result slot) whose message names the field by
//! its path in the body and says what the field must be in the API's
//! words, never in Rust's (`u32`, `struct RateBody`).
//!
//! Two kinds of test: a table with one case per kind of field and the
//! exact words expected, and a sweep that gives every field of a valid
//! body of every route a value of another type and reads every message the
//! server answers (those of the other bad-input tables too) for Rust's
//! words.

use delayd_server::ServerOptions;
use serde_json::{json, Value};

use super::{cases, flow_cases, schedule_cases, setup, TOKEN};
use crate::common::{self, Reply, Server};

/// One wrong shape and what its answer must say.
struct ShapeCase {
    name: &'static str,
    method: &'static str,
    path: &'static str,
    body: Value,
    /// The batch result slot holding the error; `None`: the whole answer.
    slot: Option<usize>,
    /// The message holds both.
    field: &'static str,
    must_be: &'static str,
}

fn shape(
    name: &'static str,
    method: &'static str,
    path: &'static str,
    body: Value,
    field: &'static str,
    must_be: &'static str,
) -> ShapeCase {
    ShapeCase {
        name,
        method,
        path,
        body,
        slot: None,
        field,
        must_be,
    }
}

const U32: &str = "an integer from 0 to 4294967295";
const U64: &str = "an integer from 0 to 18446744073709551615";

/// One case per kind of field, on the routes that have it.
fn shape_cases() -> Vec<ShapeCase> {
    let enq = "/v1/queues/q/messages";
    let queue = "/v1/queues/q";
    let schedule = "/v1/queues/q/schedules/s";
    let mut cases = vec![
        shape(
            "u32 negative",
            "POST",
            enq,
            json!({"payload": "x", "priority": -1}),
            "priority",
            U32,
        ),
        shape(
            "u32 beyond its range",
            "POST",
            enq,
            json!({"payload": "x", "priority": 4_294_967_296u64}),
            "priority",
            U32,
        ),
        shape(
            "u32 as a string",
            "POST",
            "/v1/queues/q/leases",
            json!({"max": "ten"}),
            "max",
            U32,
        ),
        shape(
            "u64 as a string",
            "PUT",
            queue,
            json!({"lease_ms": "x"}),
            "lease_ms",
            U64,
        ),
        shape(
            "u64 fraction",
            "POST",
            enq,
            json!({"payload": "x", "delay_ms": 1.5}),
            "delay_ms",
            U64,
        ),
        shape(
            "u64 negative in extend",
            "POST",
            "/v1/queues/q/messages/m/extend",
            json!({"lease_id": "l", "lease_ms": -5}),
            "lease_ms",
            U64,
        ),
        shape(
            "number as a string",
            "PUT",
            queue,
            json!({"retry": {"multiplier": "x"}}),
            "retry.multiplier",
            "a number >= 1.0",
        ),
        shape(
            "boolean as a string",
            "PUT",
            queue,
            json!({"flow": {"ordered": "yes"}}),
            "flow.ordered",
            "true or false",
        ),
        shape(
            "boolean as a number",
            "POST",
            "/v1/queues/q/messages/m/nack",
            json!({"lease_id": "l", "defer": 1}),
            "defer",
            "true or false",
        ),
        shape(
            "string as a number",
            "POST",
            "/v1/queues/q/messages/m/ack",
            json!({"lease_id": 5}),
            "lease_id",
            "a string",
        ),
        shape(
            "payload as a number",
            "POST",
            enq,
            json!({"payload": 5}),
            "payload",
            "a string",
        ),
        shape(
            "nested string",
            "PUT",
            queue,
            json!({"push": {"url": 5}}),
            "push.url",
            "a string",
        ),
        shape(
            "object as a string",
            "PUT",
            queue,
            json!({"flow": {"rate": "abc"}}),
            "flow.rate",
            "an object",
        ),
        shape(
            "object as a number",
            "PUT",
            queue,
            json!({"flow": 5}),
            "flow",
            "an object",
        ),
        shape(
            "nested integer",
            "PUT",
            queue,
            json!({"flow": {"rate": {"limit": "many", "period_ms": 1000}}}),
            "flow.rate.limit",
            U64,
        ),
        shape(
            "map value",
            "POST",
            enq,
            json!({"payload": "x", "headers": {"x-tenant": 1}}),
            "headers.x-tenant",
            "a string",
        ),
        shape(
            "map as a string",
            "POST",
            enq,
            json!({"payload": "x", "headers": "x-tenant: 1"}),
            "headers",
            "an object",
        ),
        shape(
            "array as a string",
            "POST",
            "/v1/queues/q/dead/redrive",
            json!({"ids": "a"}),
            "ids",
            "an array",
        ),
        shape(
            "array item",
            "POST",
            "/v1/queues/q/dead/redrive",
            json!({"ids": ["a", 2]}),
            "ids[1]",
            "a string",
        ),
        shape(
            "array of objects as an object",
            "POST",
            "/v1/queues/q/acks",
            json!({"acks": {"id": "m", "lease_id": "l"}}),
            "acks",
            "an array",
        ),
        shape(
            "field of an array item",
            "POST",
            "/v1/queues/q/acks",
            json!({"acks": [{"id": "m", "lease_id": "l"}, {"id": "n", "lease_id": 7}]}),
            "acks[1].lease_id",
            "a string",
        ),
        shape(
            "missing field of an array item",
            "POST",
            "/v1/queues/q/acks",
            json!({"acks": [{"id": "m", "lease_id": "l"}, {"id": "n"}]}),
            "acks[1].lease_id",
            "is required",
        ),
        shape(
            "enum-like string, unknown value",
            "PUT",
            schedule,
            json!({"every_ms": 1000, "catchup": "some"}),
            "catchup",
            "`latest` or `all`",
        ),
        shape(
            "on_conflict, unknown value",
            "POST",
            enq,
            json!({"id": "a", "payload": "p", "on_conflict": "overwrite"}),
            "on_conflict",
            "`keep`, `replace` or `debounce`",
        ),
        shape(
            "enum-like string as a number",
            "PUT",
            schedule,
            json!({"every_ms": 1000, "overlap": 1}),
            "overlap",
            "a string",
        ),
        shape(
            "template field",
            "PUT",
            schedule,
            json!({"every_ms": 1000, "message": {"payload": "p", "priority": "high"}}),
            "message.priority",
            U32,
        ),
        shape(
            "template unknown field",
            "PUT",
            schedule,
            json!({"every_ms": 1000, "message": {"payload": "p", "id": "x"}}),
            "unknown field `message.id`",
            "allowed fields: `payload`, `payload_base64`, `priority`",
        ),
        shape(
            "unknown field lists the allowed ones",
            "POST",
            enq,
            json!({"payload": "x", "dealy_ms": 1000}),
            "unknown field `dealy_ms`",
            "allowed fields: `id`, `payload`, `payload_base64`, `delay_ms`, `deliver_at`, `priority`",
        ),
        shape(
            "nested unknown field",
            "PUT",
            queue,
            json!({"flow": {"key_concurency": 2}}),
            "unknown field `flow.key_concurency`",
            "`key_concurrency`",
        ),
        shape(
            "missing nested field",
            "PUT",
            queue,
            json!({"flow": {"rate": {"limit": 1}}}),
            "flow.rate.period_ms",
            "is required",
        ),
        shape(
            "body not an object",
            "POST",
            enq,
            json!(5),
            "the body",
            "an object",
        ),
        shape(
            "preview count",
            "POST",
            "/v1/schedules/preview",
            json!({"every_ms": 1000, "count": -1}),
            "count",
            U32,
        ),
        shape(
            "patch priority",
            "PATCH",
            "/v1/queues/q/messages/m",
            json!({"priority": "high"}),
            "priority",
            U32,
        ),
    ];
    let batch = |name, items: Value, slot, field, must_be| ShapeCase {
        name,
        method: "POST",
        path: "/v1/queues/q/batch",
        body: json!({ "messages": items }),
        slot: Some(slot),
        field,
        must_be,
    };
    let ok = json!({"payload": "ok"});
    cases.extend([
        batch(
            "batch item u64",
            json!([ok, ok, ok, {"payload": "p", "delay_ms": "soon"}]),
            3,
            "messages[3].delay_ms",
            U64,
        ),
        batch(
            "batch item unknown field",
            json!([ok, {"payload": "p", "dealy_ms": 5}]),
            1,
            "unknown field `messages[1].dealy_ms`",
            "allowed fields: `id`, `payload`",
        ),
        batch(
            "batch item on_conflict, unknown value",
            json!([ok, {"id": "a", "payload": "p", "on_conflict": "merge"}]),
            1,
            "messages[1].on_conflict",
            "`keep`, `replace` or `debounce`",
        ),
        batch(
            "batch item not an object",
            json!(["p"]),
            0,
            "messages[0]",
            "an object",
        ),
        batch(
            "batch item without payload",
            json!([{}]),
            0,
            "messages[0]",
            "payload or payload_base64 is required",
        ),
        batch(
            "batch item bad base64",
            json!([{"payload_base64": "***"}]),
            0,
            "messages[0].payload_base64",
            "must be standard base64",
        ),
    ]);
    cases
}

/// The error message of an answer: the whole answer's or `slot`'s.
fn error_message(reply: &Reply, slot: Option<usize>) -> Option<(u16, String, String)> {
    let error = match slot {
        None => &reply.body["error"],
        Some(slot) => &reply.body["results"][slot]["error"],
    };
    let code = error["code"].as_str()?.to_owned();
    let message = error["message"].as_str()?.to_owned();
    Some((reply.status, code, message))
}

#[tokio::test]
async fn bad_input_shape_names_the_field_and_what_it_must_be() {
    let s = common::start_default().await;
    let mut failures = Vec::new();
    for c in shape_cases() {
        let r = s.call(c.method, c.path, Some(c.body)).await;
        let want_status = if c.slot.is_some() { 200 } else { 400 };
        match error_message(&r, c.slot) {
            Some((status, code, message))
                if status == want_status
                    && code == "invalid_argument"
                    && message.contains(c.field)
                    && message.contains(c.must_be) => {}
            _ => failures.push(format!(
                "{}: got {} {}, want invalid_argument naming {:?} and {:?}",
                c.name, r.status, r.body, c.field, c.must_be
            )),
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

/// The whole message, for the bodies issue 38 quotes.
#[tokio::test]
async fn bad_input_shape_exact_words() {
    let s = common::start_default().await;
    for (method, path, body, want) in [
        (
            "PUT",
            "/v1/queues/q",
            json!({"flow": {"rate": "abc"}}),
            r#"flow.rate must be an object, got the string "abc""#,
        ),
        (
            "PUT",
            "/v1/queues/q",
            json!({"lease_ms": "x"}),
            r#"lease_ms must be an integer from 0 to 18446744073709551615, got the string "x""#,
        ),
        (
            "POST",
            "/v1/queues/q/messages",
            json!({"payload": "x", "priority": -1}),
            "priority must be an integer from 0 to 4294967295, got -1",
        ),
    ] {
        let r = s.call(method, path, Some(body)).await;
        assert_eq!(
            (r.status, r.code()),
            (400, "invalid_argument"),
            "{}",
            r.body
        );
        assert_eq!(r.body["error"]["message"], want);
    }
    s.stop().await.unwrap();
}

/// A valid body of each route with a JSON body, using every field.
fn valid_bodies() -> Vec<(&'static str, &'static str, Value)> {
    let enqueue = json!({"id": "n1", "payload": "p", "delay_ms": 1, "priority": 1,
        "headers": {"a": "b"}, "max_attempts": 1, "key": "k", "on_conflict": "debounce",
        "debounce_max_ms": 1});
    let rate = json!({"limit": 1, "period_ms": 1000, "burst": 1});
    let template = json!({"payload_base64": "cA==", "priority": 1, "headers": {"a": "b"},
        "max_attempts": 1, "key": "k"});
    vec![
        (
            "PUT",
            "/v1/queues/q",
            json!({"lease_ms": 1000, "max_attempts": 1,
                "retry": {"initial_ms": 1, "max_ms": 2, "multiplier": 2.0},
                "push": {"url": "http://127.0.0.1:9/", "timeout_ms": 1, "concurrency": 1,
                    "secret": "s", "headers": {"a": "b"}},
                "flow": {"rate": rate, "key_rate": rate, "concurrency": 1, "key_concurrency": 1,
                    "ordered": false, "max_deferrals": 1},
                "retain_ms": 1000}),
        ),
        ("POST", "/v1/queues/q/messages", enqueue.clone()),
        (
            "POST",
            "/v1/queues/q/messages",
            json!({"payload_base64": "cA==", "deliver_at": 1}),
        ),
        (
            "POST",
            "/v1/queues/q/batch",
            json!({ "messages": [enqueue] }),
        ),
        (
            "PATCH",
            "/v1/queues/q/messages/s",
            json!({"delay_ms": 1, "deliver_at": 1, "priority": 1}),
        ),
        (
            "POST",
            "/v1/queues/q/leases",
            json!({"max": 1, "wait_ms": 0, "lease_ms": 1000}),
        ),
        (
            "POST",
            "/v1/queues/q/messages/lm/ack",
            json!({"lease_id": "l"}),
        ),
        (
            "POST",
            "/v1/queues/q/acks",
            json!({"acks": [{"id": "lm", "lease_id": "l"}]}),
        ),
        (
            "POST",
            "/v1/queues/q/messages/lm/nack",
            json!({"lease_id": "l", "delay_ms": 1, "defer": false}),
        ),
        (
            "POST",
            "/v1/queues/q/messages/lm/extend",
            json!({"lease_id": "l", "lease_ms": 1000}),
        ),
        ("POST", "/v1/queues/q/dead/redrive", json!({"ids": ["a"]})),
        (
            "PUT",
            "/v1/queues/q/schedules/s",
            json!({"every_ms": 1000, "start_at": 1, "end_at": 2, "max_fires": 1,
                "message": template, "catchup": "all", "catchup_window_ms": 1,
                "overlap": "skip", "jitter_ms": 0, "paused": true}),
        ),
        (
            "PUT",
            "/v1/queues/q/schedules/s",
            json!({"cron": "@hourly", "tz": "UTC", "message": {"payload": "p"}}),
        ),
        (
            "POST",
            "/v1/schedules/preview",
            json!({"cron": "@hourly", "tz": "UTC", "start_at": 1, "count": 1}),
        ),
    ]
}

/// Every value of `body` (objects' fields and arrays' items, at any
/// depth): its JSON pointer, its path as the server names it, the value.
fn fields(body: &Value) -> Vec<(String, String, Value)> {
    fn walk(value: &Value, pointer: String, path: String, out: &mut Vec<(String, String, Value)>) {
        let children: Vec<(String, String, &Value)> = match value {
            Value::Object(map) => map
                .iter()
                .map(|(key, child)| {
                    let path = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    (format!("{pointer}/{key}"), path, child)
                })
                .collect(),
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, child)| (format!("{pointer}/{i}"), format!("{path}[{i}]"), child))
                .collect(),
            _ => Vec::new(),
        };
        for (pointer, path, child) in children {
            out.push((pointer.clone(), path.clone(), child.clone()));
            walk(child, pointer, path, out);
        }
    }
    let mut out = Vec::new();
    walk(body, String::new(), String::new(), &mut out);
    out
}

/// Values of other types than `original` (for an integer, also a negative
/// and a fraction). `[]` where an object is expected is left out: serde's
/// derive reads an array positionally as a struct (`{"flow": []}` is
/// `{"flow": {}}`), a gap this sweep does not cover.
fn wrong_values(original: &Value) -> Vec<Value> {
    let all = [
        json!("x"),
        json!(-1),
        json!(1.5),
        json!(true),
        json!({}),
        json!([]),
    ];
    let kind = |v: &Value| match v {
        Value::String(_) => "string",
        Value::Number(n) if n.is_u64() => "unsigned",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
        Value::Object(_) => "object",
        Value::Array(_) => "array",
        Value::Null => "null",
    };
    all.into_iter()
        .filter(|v| match (kind(original), kind(v)) {
            ("object", "array") => false,
            // A fraction field (retry.multiplier) takes any number.
            ("number", "number" | "unsigned") => false,
            (a, b) => a != b,
        })
        .collect()
}

/// Words of Rust's that a client must never read in an error message: the
/// primitive and standard type names, `struct`, and CamelCase identifiers
/// (`RateBody`, `EnqueueWire`, `BTreeMap`). Quoted text (a value the
/// client sent, such as a header name) is left out.
fn rust_words(message: &str) -> Vec<String> {
    const WORDS: &[&str] = &[
        "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize",
        "f32", "f64", "bool", "str", "struct", "enum", "tuple", "Option", "Some", "None", "Vec",
        "String", "Body",
    ];
    let mut unquoted = String::new();
    let mut quoted = false;
    let mut escaped = false;
    for c in message.chars() {
        match (quoted, escaped, c) {
            (true, false, '\\') => escaped = true,
            (true, true, _) => escaped = false,
            (_, _, '"') => quoted = !quoted,
            (false, _, c) => unquoted.push(c),
            _ => {}
        }
    }
    let camel = |word: &str| {
        word.chars()
            .zip(word.chars().skip(1))
            .any(|(a, b)| a.is_ascii_lowercase() && b.is_ascii_uppercase())
    };
    unquoted
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| WORDS.contains(word) || camel(word))
        .map(str::to_owned)
        .collect()
}

#[test]
fn rust_words_finds_them() {
    assert_eq!(
        rust_words("invalid type: string \"abc\", expected struct RateBody"),
        ["struct", "RateBody"]
    );
    assert_eq!(
        rust_words("expected u32, got Option<Vec<String>>"),
        ["u32", "Option", "Vec", "String"]
    );
    assert!(rust_words(r#"header "DelayD-Id \" u32": reserved"#).is_empty());
    assert!(rust_words("priority must be an integer from 0 to 4294967295, got -1").is_empty());
}

/// Sends `body` with the token.
async fn send(s: &Server, method: &str, path: &str, body: Vec<u8>) -> Reply {
    let auth = format!("Bearer {TOKEN}");
    s.raw(method, path, body, &[("authorization", &auth)]).await
}

/// The messages of an answer: the error's and those of any result slots.
fn messages(reply: &Reply) -> Vec<String> {
    let mut out: Vec<String> = reply.body["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .into_iter()
        .collect();
    if let Some(results) = reply.body["results"].as_array() {
        out.extend(
            results
                .iter()
                .filter_map(|r| r["error"]["message"].as_str().map(str::to_owned)),
        );
    }
    out
}

#[tokio::test]
async fn bad_input_messages_hold_no_rust_type_names() {
    let options = ServerOptions {
        tokens: vec![TOKEN.into()],
        ..ServerOptions::default()
    };
    let s = common::start(common::model(), options).await;
    let acked_lease = setup(&s).await;
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut failures = Vec::new();

    // Every field of every route's body, given a value of another type:
    // refused, naming the field.
    for (method, path, valid) in valid_bodies() {
        for (pointer, field, original) in fields(&valid) {
            for wrong in wrong_values(&original) {
                let mut body = valid.clone();
                *body.pointer_mut(&pointer).expect("a field") = wrong.clone();
                let r = send(&s, method, path, serde_json::to_vec(&body).unwrap()).await;
                let (slot, whole) = match field.strip_prefix("messages[0]") {
                    Some(_) if path.ends_with("/batch") => (Some(0), 200),
                    _ => (None, 400),
                };
                let named = format!("{field} must be ");
                match error_message(&r, slot) {
                    Some((status, code, message))
                        if status == whole
                            && code == "invalid_argument"
                            && message.contains(&named) => {}
                    _ => failures.push(format!(
                        "{method} {path} with {field} = {wrong}: got {} {}, want invalid_argument naming {named:?}",
                        r.status, r.body
                    )),
                }
                let what = format!("{method} {path} with {field} = {wrong}");
                seen.extend(messages(&r).into_iter().map(|m| (what.clone(), m)));
            }
        }
    }
    // The other tables' bad input.
    for c in cases(&acked_lease) {
        let headers: Vec<(&str, &str)> = c.headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = s.raw(c.method, &c.path, c.body.clone(), &headers).await;
        seen.extend(messages(&r).into_iter().map(|m| (c.name.to_owned(), m)));
    }
    for c in schedule_cases() {
        let r = send(&s, c.method, c.path, serde_json::to_vec(&c.body).unwrap()).await;
        seen.extend(messages(&r).into_iter().map(|m| (c.name.to_owned(), m)));
    }
    for c in flow_cases() {
        let body = c
            .body
            .map(|b| serde_json::to_vec(&b).unwrap())
            .unwrap_or_default();
        let r = send(&s, c.method, &c.path, body).await;
        seen.extend(messages(&r).into_iter().map(|m| (c.name.to_owned(), m)));
    }
    for c in super::replace::conflict_cases() {
        let body = c
            .body
            .map(|b| serde_json::to_vec(&b).unwrap())
            .unwrap_or_default();
        let r = send(&s, c.method, &c.path, body).await;
        seen.extend(messages(&r).into_iter().map(|m| (c.name.to_owned(), m)));
    }
    for c in super::retention::retain_cases() {
        let body = c
            .body
            .map(|b| serde_json::to_vec(&b).unwrap())
            .unwrap_or_default();
        let r = send(&s, c.method, &c.path, body).await;
        seen.extend(messages(&r).into_iter().map(|m| (c.name.to_owned(), m)));
    }
    for c in shape_cases() {
        let r = send(&s, c.method, c.path, serde_json::to_vec(&c.body).unwrap()).await;
        seen.extend(messages(&r).into_iter().map(|m| (c.name.to_owned(), m)));
    }

    assert!(seen.len() > 300, "only {} messages read", seen.len());
    for (what, message) in &seen {
        let words = rust_words(message);
        if !words.is_empty() {
            failures.push(format!("{what}: {message:?} has Rust's {words:?}"));
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
