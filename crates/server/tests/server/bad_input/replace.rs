//! `on_conflict` and `debounce_max_ms` (api.md, "Retention, replace and
//! debounce"): an unknown `on_conflict`, a `debounce_max_ms` without
//! `on_conflict: debounce`, and a `replace` or `debounce` without an `id`
//! are each 400 `invalid_argument` naming the field, in a single enqueue
//! and in a batch item (its own result slot), and change nothing, even
//! when the id names a live message.

use delayd_server::ServerOptions;
use serde_json::{json, Value};

use super::{snapshot, FlowCase};
use crate::common;

/// The three refusals as enqueue bodies, each with the field it names.
/// The id `m` names the live message the test puts in `q` first.
fn bodies() -> Vec<(&'static str, Value, &'static str)> {
    vec![
        (
            "unknown on_conflict",
            json!({"id": "m", "payload": "p", "on_conflict": "overwrite"}),
            "on_conflict",
        ),
        (
            "on_conflict of the wrong case",
            json!({"id": "m", "payload": "p", "on_conflict": "Replace"}),
            "on_conflict",
        ),
        (
            "on_conflict empty",
            json!({"id": "m", "payload": "p", "on_conflict": ""}),
            "on_conflict",
        ),
        (
            "debounce_max_ms without on_conflict",
            json!({"id": "m", "payload": "p", "debounce_max_ms": 1000}),
            "debounce_max_ms",
        ),
        (
            "debounce_max_ms with keep",
            json!({"id": "m", "payload": "p", "on_conflict": "keep", "debounce_max_ms": 1000}),
            "debounce_max_ms",
        ),
        (
            "debounce_max_ms with replace",
            json!({"id": "m", "payload": "p", "on_conflict": "replace", "debounce_max_ms": 1000}),
            "debounce_max_ms",
        ),
        (
            "replace without id",
            json!({"payload": "p", "on_conflict": "replace"}),
            "on_conflict",
        ),
        (
            "debounce without id",
            json!({"payload": "p", "on_conflict": "debounce", "debounce_max_ms": 5}),
            "on_conflict",
        ),
    ]
}

/// The single enqueue of each body (for the other bad-input sweeps).
pub(super) fn conflict_cases() -> Vec<FlowCase> {
    bodies()
        .into_iter()
        .map(|(name, body, field)| FlowCase {
            name,
            method: "POST",
            path: "/v1/queues/q/messages".into(),
            body: Some(body),
            field,
        })
        .collect()
}

#[tokio::test]
async fn conflict_bad_input_names_the_field_model() {
    conflict_bad_input_names_the_field(common::model()).await;
}

#[tokio::test]
async fn conflict_bad_input_names_the_field_local() {
    let (broker, _dir) = common::local_broker().await;
    conflict_bad_input_names_the_field(broker).await;
}

async fn conflict_bad_input_names_the_field(broker: std::sync::Arc<dyn delayd_core::Broker>) {
    let s = common::start(broker, ServerOptions::default()).await;
    let m = s
        .call(
            "POST",
            "/v1/queues/q/messages",
            Some(json!({"id": "m", "payload": "live", "delay_ms": 3_600_000})),
        )
        .await;
    assert_eq!(m.status, 201, "{}", m.body);
    let before = snapshot(&s).await;
    let mut failures = Vec::new();
    for c in conflict_cases() {
        let r = s.call(c.method, &c.path, c.body.clone()).await;
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
    // In a batch: 200, each refusal in its own slot naming the field (an
    // unknown value with the item's place), nothing enqueued or replaced.
    let items: Vec<Value> = bodies().into_iter().map(|(_, body, _)| body).collect();
    let r = s
        .call(
            "POST",
            "/v1/queues/q/batch",
            Some(json!({ "messages": items })),
        )
        .await;
    if r.status != 200 {
        failures.push(format!("batch: got {} {}", r.status, r.body));
    }
    for (slot, (name, _, field)) in bodies().into_iter().enumerate() {
        let error = &r.body["results"][slot]["error"];
        let message = error["message"].as_str().unwrap_or_default();
        if error["code"] != "invalid_argument" || !message.contains(field) {
            failures.push(format!(
                "batch item {slot} ({name}): got {}, want invalid_argument naming {field:?}",
                r.body["results"][slot]
            ));
        }
    }
    let unknown = &r.body["results"][0]["error"]["message"];
    if !unknown
        .as_str()
        .is_some_and(|m| m.starts_with("messages[0].on_conflict must be"))
    {
        failures.push(format!("batch item 0 names its place: {unknown}"));
    }
    if snapshot(&s).await != before {
        failures.push("batch: changed the store".into());
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    s.stop().await.unwrap();
}
