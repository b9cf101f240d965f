//! `retain_ms` (api.md, "Retention, replace and debounce"): every wrong
//! value is 400 `invalid_argument` naming `retain_ms`, and neither the
//! queue it was sent to nor any other changes (an unknown queue is not
//! created).

use delayd_server::ServerOptions;
use serde_json::{json, Value};

use super::{snapshot, FlowCase};
use crate::common;

fn retain_put(name: &'static str, path: &str, retain_ms: Value) -> FlowCase {
    FlowCase {
        name,
        method: "PUT",
        path: path.into(),
        body: Some(json!({ "retain_ms": retain_ms })),
        field: "retain_ms",
    }
}

/// Negative, fractional, a string, above 30 days: on the existing queue
/// `q` and on a queue that does not exist yet.
pub(super) fn retain_cases() -> Vec<FlowCase> {
    let mut cases = Vec::new();
    for path in ["/v1/queues/q", "/v1/queues/fresh"] {
        cases.extend([
            retain_put("retain_ms negative", path, json!(-1)),
            retain_put("retain_ms fraction", path, json!(1.5)),
            retain_put("retain_ms string", path, json!("1d")),
            retain_put("retain_ms above 30 days", path, json!(2_592_000_001u64)),
            retain_put("retain_ms far above 30 days", path, json!(u64::MAX)),
        ]);
    }
    cases
}

#[tokio::test]
async fn retain_bad_input_names_the_field_model() {
    retain_bad_input_names_the_field(common::model()).await;
}

#[tokio::test]
async fn retain_bad_input_names_the_field_local() {
    let (broker, _dir) = common::local_broker().await;
    retain_bad_input_names_the_field(broker).await;
}

async fn retain_bad_input_names_the_field(broker: std::sync::Arc<dyn delayd_core::Broker>) {
    let s = common::start(broker, ServerOptions::default()).await;
    let put = s
        .call("PUT", "/v1/queues/q", Some(json!({"retain_ms": 5000})))
        .await;
    assert_eq!(
        (put.status, &put.body["config"]["retain_ms"]),
        (201, &json!(5000))
    );
    let before = snapshot(&s).await;
    let mut failures = Vec::new();
    for c in retain_cases() {
        let r = s.call(c.method, &c.path, c.body.clone()).await;
        let message = r.body["error"]["message"].as_str().unwrap_or_default();
        if (r.status, r.code()) != (400, "invalid_argument") || !message.contains(c.field) {
            failures.push(format!(
                "{} ({}): got {} {}, want 400 invalid_argument naming {:?}",
                c.name, c.path, r.status, r.body, c.field
            ));
        }
        if snapshot(&s).await != before {
            failures.push(format!("{} ({}): changed the store", c.name, c.path));
        }
    }
    assert_eq!(s.call("GET", "/v1/queues/fresh", None).await.status, 404);
    // The bounds themselves are accepted.
    for retain_ms in [2_592_000_000u64, 0] {
        let r = s
            .call(
                "PUT",
                "/v1/queues/q",
                Some(json!({ "retain_ms": retain_ms })),
            )
            .await;
        assert_eq!(
            (r.status, &r.body["config"]["retain_ms"]),
            (200, &json!(retain_ms))
        );
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    s.stop().await.unwrap();
}
